"""Commit messages and documentation as tokenized sentences (git_corpus).

What a commit message and a documentation file become, as
`dpftrl_tff.data.git_corpus`'s module docstring describes it: trailers, quoted
diffs, code and markup dropped, URLs and e-mail addresses removed,
sentences split, and tokens as TFF's StackOverflow `tokens` (lower case,
punctuation split off, English contractions split).
"""

import re
from typing import Iterator, List, Optional, Sequence


_TRAILER_RE = re.compile(
    r'^\s*([A-Za-z][A-Za-z0-9]*-)*(by|to|id|Id|ID)\s*:|'
    r'^\s*(Cc|CC|Link|Links|Fixes|Bug|Closes|References|Change-Id|'
    r'Message-Id|Message-ID|Cherry-picked-from|git-svn-id|Signed-off|'
    r'Co-authored-by)\s*:', re.IGNORECASE)
_MERGE_RE = re.compile(r'^Merge (branch|tag|remote-tracking branch|pull '
                       r'request|commit|remote branch|branches|\') ')
_DIFF_START_RE = re.compile(r'^(diff --git |--- a/|\+\+\+ b/|@@ |index '
                            r'[0-9a-f]+\.\.|--- [^ ]+\t)')
_URL_RE = re.compile(r'(https?|ftp|git|ssh)://\S+|\bwww\.\S+', re.IGNORECASE)
_EMAIL_RE = re.compile(r'<?[\w.+-]+@[\w-]+(\.[\w-]+)+>?')
_BULLET_RE = re.compile(r'^\s{0,3}([*+-]|\d+[.)])\s+')
_SENTENCE_END_RE = re.compile(r'(?<=[.!?])\s+(?=\S)')
_TOKEN_RE = re.compile(
    r"[a-z0-9]+(?:[-_.][a-z0-9]+)*(?:'(?:t|s|re|ve|ll|d|m)\b)?|\S")
_CONTRACTION_RE = re.compile(r"^(.+?)(n't|'s|'re|'ve|'ll|'d|'m)$")


def tokenize(text: str) -> List[str]:
  """StackOverflow-style tokens: lower case, punctuation split off.

  Words keep inner hyphens, underscores and dots ("git-log", "foo.c",
  "2.0"); every other non-space character is a token of its own; English
  contractions split as in the Penn Treebank ("don't" -> "do", "n't").
  """
  text = text.lower().replace('\u2019', "'")
  out = []
  for token in _TOKEN_RE.findall(text):
    match = _CONTRACTION_RE.match(token)
    if match and token[0].isalnum():
      out.extend(match.groups())
    else:
      out.append(token)
  return out


def _strip_inline(text: str) -> str:
  return _EMAIL_RE.sub(' ', _URL_RE.sub(' ', text))


def _paragraph_sentences(lines: Sequence[str]) -> Iterator[str]:
  """Joins wrapped lines (bullets start anew) and splits at sentence ends."""
  items: List[List[str]] = []
  for line in lines:
    if _BULLET_RE.match(line) or not items:
      items.append([_BULLET_RE.sub('', line)])
    else:
      items[-1].append(line.strip())
  for item in items:
    text = ' '.join(part.strip() for part in item if part.strip())
    for sentence in _SENTENCE_END_RE.split(text):
      if sentence.strip():
        yield sentence


def _is_code_line(line: str) -> bool:
  return line.startswith('\t') or line.startswith('    ')


def message_sentences(message: str, *,
                      min_tokens_per_sentence: int = 2) -> List[str]:
  """A commit message's tokenized sentences (see the module docstring)."""
  lines = message.replace('\r\n', '\n').split('\n')
  if not lines or _MERGE_RE.match(lines[0]):
    return []
  kept: List[Optional[str]] = []   # None separates paragraphs.
  in_diff = in_fence = False
  for index, line in enumerate(lines):
    # An indented line right after text continues it (a bullet's wrapped
    # line); after a blank line or code it is code.
    code = _is_code_line(line) and (not kept or kept[-1] is None)
    stripped = line.strip()
    if stripped.startswith('```'):
      in_fence = not in_fence
      kept.append(None)
      continue
    if in_fence:
      continue
    if _DIFF_START_RE.match(line):
      in_diff = True
    if in_diff:
      if not stripped:
        in_diff = False
      continue
    if stripped.startswith('-- >8 --') or stripped.startswith('--- >8 ---'):
      break   # Scissors: what follows is a patch.
    if (not stripped or stripped.startswith('>') or code or
        (index > 0 and _TRAILER_RE.match(line))):
      kept.append(None)
      continue
    kept.append(_strip_inline(line))
  out = []
  paragraph: List[str] = []
  for line in kept + [None]:
    if line is not None:
      paragraph.append(line)
      continue
    for sentence in _paragraph_sentences(paragraph):
      tokens = tokenize(sentence)
      if len(tokens) >= min_tokens_per_sentence:
        out.append(' '.join(tokens))
    paragraph = []
  return out


_ADOC_MARKUP_RE = re.compile(
    r'^(=+ |#+ |\[.*\]$|:[\w-]+:|\.[A-Za-z]|ifdef::|endif::|ifndef::|'
    r'include::|image::|//|\|===|\+$|[-=~^`*_.]{3,}$)')


def document_sentences(text: str, *,
                       min_tokens_per_sentence: int = 3) -> List[str]:
  """A documentation file's tokenized sentences.

  Headings become sentences of their own; AsciiDoc / Markdown directives,
  attribute lines, tables, delimited and indented blocks are dropped; the
  remaining paragraphs are cut as commit bodies are.
  """
  out: List[str] = []
  paragraph: List[str] = []
  in_block = False

  def flush():
    for sentence in _paragraph_sentences(paragraph):
      tokens = tokenize(re.sub(r'[`*_]{1,2}|linkgit:|<[^>]*>', ' ',
                               sentence))
      if len(tokens) >= min_tokens_per_sentence:
        out.append(' '.join(tokens))
    paragraph.clear()

  for line in text.replace('\r\n', '\n').split('\n'):
    stripped = line.strip()
    if re.fullmatch(r'(-{4,}|\.{4,}|`{3}.*|~{4,}|={4,}|\*{4,})', stripped):
      in_block = not in_block
      flush()
      continue
    if in_block:
      continue
    if not stripped or _is_code_line(line) or stripped.startswith('|'):
      flush()
      continue
    if _ADOC_MARKUP_RE.match(stripped):
      flush()
      heading = re.match(r'^(=+|#+)\s+(.*)$', stripped)
      if heading:
        paragraph.append(heading.group(2))
        flush()
      continue
    paragraph.append(_strip_inline(stripped))
  flush()
  return out
