# Kept equal to package.json's "version" (tests/test_packaging.py checks it).
__version__ = "0.1.0"
