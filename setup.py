"""dpftrl_tff: DP-FTRL federated learning of keyboard LMs in TFF.

Install with `make setup` (see README): tensorflow-federated 0.87.0 cannot be
resolved by pip on its own (it pins jaxlib 0.4.14, no longer served), so the
pinned list in requirements.txt is installed first and TFF with --no-deps.
"""

import setuptools

setuptools.setup(
    name='dpftrl_tff',
    version='0.1.0',
    description=('DP-FTRL federated learning of keyboard language models in '
                 'TensorFlow Federated (Xu, Zhang et al. 2023).'),
    packages=setuptools.find_packages(include=['dpftrl_tff', 'dpftrl_tff.*',
                                               'experiments']),
    python_requires='>=3.11,<3.12',
    # Pinned in requirements.txt / requirements-tff.txt; see the docstring.
    install_requires=[],
)
