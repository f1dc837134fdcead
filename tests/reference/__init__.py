"""Test oracles: short, readable references the fast code is tested against.

  tree_reference      the tree's squared sensitivity, exactly, by dynamic
                      programming over participation patterns;
  tree_brute_force    the same by enumerating every pattern (small trees);
  secagg_reference    SecAgg's discretization in NumPy.

They are not used by the library or the binaries.
"""
