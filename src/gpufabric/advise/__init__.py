"""The design advisor (``gpufabric advise``): a scenario in, ranked cluster designs out.

:mod:`~gpufabric.advise.scenario` reads what must run and under which constraints,
:mod:`~gpufabric.advise.prices` the sourced prices and power, and :mod:`~gpufabric.advise.core`
generates the design space from the catalog, prunes it by the design rules and by sound bounds,
evaluates the rest with the training and serving models through :mod:`gpufabric.sweep`, and
ranks them by the scenario's objective (docs/advisor.md).
"""
