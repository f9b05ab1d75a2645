"""Keeping samples: the GPU history ring and the one min/max downsampling that bounds what is drawn."""
