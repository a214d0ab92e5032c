"""Measuring real machines and fitting the model to them."""
