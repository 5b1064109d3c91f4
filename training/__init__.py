"""raspi-tf training: the code every TensorFlow task of a cluster runs.

Importing the package does no work and imports no TensorFlow; run it with
``python -m training --help``.
"""

__version__ = "0.1.0"
