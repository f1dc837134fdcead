"""The BandMF optimizer's objective with dense products: a test oracle for
`accounting.bandmf._error_and_gradient`.

For the errors e_t = ||(A C^-1)[t, :]||^2 of the prefix sums (A the T x T
lower-triangular matrix of ones) reduced to a loss L with gradient w_t in
e_t, the gradient in C is G = -2 M^T (A^T W B) M^T, with M = C^-1 from a
triangular solve against the identity, B = A M and W = diag(w), every
product dense (about 5 T^3 / 2 multiply-adds), every entry of G computed.
"""

import numpy as np
import scipy.linalg


def error_and_gradient(c, reduction):
  """(reduction's loss, its gradient in every entry of C)."""
  rounds = c.shape[0]
  inverse = scipy.linalg.solve_triangular(c, np.eye(rounds), lower=True)
  b = np.cumsum(inverse, axis=0)
  loss, weights = reduction(np.sum(b * b, axis=1))
  at_wb = np.cumsum((weights[:, np.newaxis] * b)[::-1], axis=0)[::-1]
  return loss, -2.0 * (inverse.T @ at_wb @ inverse.T)
