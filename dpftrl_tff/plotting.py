"""Plot helpers (matplotlib, headless): plots written as PNG.

Figures are drawn on matplotlib's object-oriented API with the Agg canvas,
so importing or using this module does not change pyplot's global backend.
"""

from matplotlib.backends import backend_agg
from matplotlib import figure as mpl_figure
import numpy as np


def _subplots(ncols=1, *, figsize, dpi):
  fig = mpl_figure.Figure(figsize=figsize, dpi=dpi)
  backend_agg.FigureCanvasAgg(fig)
  axes = fig.subplots(1, ncols)
  return fig, axes


def _label(ax, *, title, xlabel, ylabel):
  if title:
    ax.set_title(title)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)


def _write(fig, path):
  fig.tight_layout()
  fig.savefig(path)


def _save(fig, ax, path, *, title, xlabel, ylabel):
  _label(ax, title=title, xlabel=xlabel, ylabel=ylabel)
  _write(fig, path)


def line_plot(path, series, *, title, xlabel, ylabel, logy=False):
  """Writes a PNG with one line per (label, xs, ys) in `series`."""
  fig, ax = _subplots(figsize=(5.2, 3.8), dpi=120)
  for label, xs, ys in series:
    ax.plot(xs, ys, label=label, linewidth=1.5)
  if logy:
    ax.set_yscale('log')
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel=ylabel)


def histogram_plot(path, series, *, title, xlabel, bins=40):
  """A PNG of overlaid histograms, one per (label, values)."""
  fig, ax = _subplots(figsize=(5.6, 3.8), dpi=120)
  for label, values in series:
    ax.hist(values, bins=bins, alpha=0.5, label=label)
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel='count')


def band_plot(path, series, *, title, xlabel, ylabel):
  """A PNG of mean lines with shaded bands: (label, xs, mean, low, high)."""
  fig, ax = _subplots(figsize=(6.4, 4.2), dpi=120)
  for label, xs, mean, low, high in series:
    line, = ax.plot(xs, mean, label=label, linewidth=1.5)
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2,
                    linewidth=0)
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel=ylabel)


def errorbar_plot(path, xs, means, stds, *, title, xlabel, ylabel,
                  baseline=None):
  """Writes a PNG of means with +- std error bars (and a baseline line)."""
  fig, ax = _subplots(figsize=(5.2, 3.8), dpi=120)
  ax.errorbar(xs, means, yerr=stds, marker='o', capsize=3, linewidth=1.5,
              label='mean +- std over seeds')
  if baseline is not None:
    ax.axhline(baseline, color='gray', linestyle='--', linewidth=1,
               label='unigram baseline')
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel=ylabel)


def panels_plot(path, panels, *, xlabel, title=None):
  """A PNG of side-by-side panels: each (ylabel, series, logy).

  A series is (label, xs, ys), or (label, xs, ys, low, high) for a line
  with a shaded band between low and high.
  """
  fig, axes = _subplots(len(panels), figsize=(4.6 * len(panels), 3.6),
                        dpi=110)
  axes = list(axes) if len(panels) > 1 else [axes]
  for ax, (ylabel, series, logy) in zip(axes, panels):
    for label, xs, ys, *band in series:
      line, = ax.plot(xs, ys, marker='o', markersize=3, linewidth=1.3,
                      label=label)
      if band:
        ax.fill_between(xs, band[0], band[1], color=line.get_color(),
                        alpha=0.15, linewidth=0)
    if logy:
      ax.set_yscale('log')
    _label(ax, title=None, xlabel=xlabel, ylabel=ylabel)
  if title:
    fig.suptitle(title, fontsize=10)
  _write(fig, path)


def training_curves(path, rows):
  """Writes a PNG of loss and in-vocab accuracy against rounds (2 panels)."""
  panels = []
  for ylabel, keys in (('loss', ('train_loss', 'eval_loss')),
                       ('in-vocab accuracy', ('train_in_vocab_accuracy',
                                              'eval_in_vocab_accuracy',
                                              'eval_in_vocab_top3_accuracy'))):
    series = []
    for key in keys:
      points = [(r['round'], r[key]) for r in rows
                if isinstance(r.get(key), (int, float))]
      if points:
        xs, ys = zip(*points)
        series.append(('eval top-3' if 'top3' in key else key.split('_')[0],
                       xs, ys))
    panels.append((ylabel, series, False))
  panels_plot(path, panels, xlabel='round')


def heatmap_plot(path, grid, *, row_labels, col_labels, xlabel, ylabel,
                 title):
  """A PNG of a 2-D grid of values, each cell annotated (NaN: blank)."""
  grid = np.asarray(grid, dtype=float)
  fig, ax = _subplots(figsize=(1.2 * grid.shape[1] + 2.5,
                               0.8 * grid.shape[0] + 2.0), dpi=120)
  image = ax.imshow(grid, cmap='viridis', aspect='auto', origin='lower')
  fig.colorbar(image, ax=ax)
  ax.set_xticks(range(grid.shape[1]), [f'{v:g}' if isinstance(
      v, (int, float)) else str(v) for v in col_labels])
  ax.set_yticks(range(grid.shape[0]), [f'{v:g}' if isinstance(
      v, (int, float)) else str(v) for v in row_labels])
  for (i, j), value in np.ndenumerate(grid):
    if np.isfinite(value):
      ax.text(j, i, f'{value:.1f}', ha='center', va='center', fontsize=8,
              color='white')
  ax.set_title(title, fontsize=9)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  _write(fig, path)


def frontier_plot(path, points, labels, frontier_indices, *, xlabel, ylabel,
                  title):
  """A PNG of (x, y) points with the frontier through `frontier_indices`."""
  fig, ax = _subplots(figsize=(6.0, 4.2), dpi=120)
  ax.scatter([p[0] for p in points], [p[1] for p in points], s=18,
             color='gray', label='grid points')
  front = [points[i] for i in frontier_indices]
  ax.plot([p[0] for p in front], [p[1] for p in front], marker='o',
          color='tab:red', linewidth=1.5, label='frontier')
  for i in frontier_indices:
    ax.annotate(labels[i], points[i], fontsize=6, xytext=(3, 3),
                textcoords='offset points')
  ax.set_xscale('log')
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel=ylabel)


def bar_plot(path, labels, values, *, title, ylabel, reference=()):
  """A PNG of one bar per label, with horizontal (label, y) references."""
  fig, ax = _subplots(figsize=(max(4.0, 0.9 * len(labels) + 1.5), 3.8),
                      dpi=120)
  ax.bar(range(len(labels)), values, color='tab:blue')
  ax.set_xticks(range(len(labels)), labels, rotation=30, ha='right',
                fontsize=7)
  for label, y in reference:
    ax.axhline(y, color='gray', linestyle='--', linewidth=1, label=label)
  _save(fig, ax, path, title=title, xlabel='', ylabel=ylabel)


def choice_plot(path, xs, ys, *, chosen, hlines, title, xlabel, ylabel,
                logx=False, logy=False):
  """A PNG of a curve of tried points, the chosen point marked, and
  horizontal (label, y) lines such as a target."""
  fig, ax = _subplots(figsize=(5.4, 3.9), dpi=120)
  ax.plot(xs, ys, marker='o', linewidth=1.3, label='tried')
  ax.scatter([chosen[0]], [chosen[1]], s=90, facecolors='none',
             edgecolors='tab:red', linewidths=2, label='chosen', zorder=3)
  for (label, y), style in zip(hlines, ('--', ':', '-.')):
    ax.axhline(y, color='gray', linestyle=style, linewidth=1, label=label)
  if logx:
    ax.set_xscale('log')
  if logy:
    ax.set_yscale('log')
  _save(fig, ax, path, title=title, xlabel=xlabel, ylabel=ylabel)
