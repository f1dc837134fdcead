"""Plot helpers (matplotlib, headless): line plots written as PNG."""

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top


def line_plot(path, series, *, title, xlabel, ylabel, logy=False):
  """Writes a PNG with one line per (label, xs, ys) in `series`."""
  fig, ax = plt.subplots(figsize=(5.2, 3.8), dpi=120)
  for label, xs, ys in series:
    ax.plot(xs, ys, label=label, linewidth=1.5)
  ax.set_title(title)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if logy:
    ax.set_yscale('log')
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
