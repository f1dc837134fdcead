"""Federated text: StackOverflow through TFF's loader, generated data, git corpora, public text.

  stackoverflow  TFF's StackOverflow database (--cache_dir): checks, vocabulary,
                 preprocessing, client datasets, the eval set;
  data_flags     the data flags the training and pretraining binaries share;
  synthetic      a small StackOverflow-format database generated offline;
  git_corpus     a git history as a federated corpus (authors are clients);
  git_text       commit messages and documentation as tokenized sentences;
  public_corpus  public text for pretraining, through TensorFlow Datasets.
"""
