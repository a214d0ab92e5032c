"""gpufabric: model how GPUs are connected and what that connection costs."""

__version__ = "0.1.0"
