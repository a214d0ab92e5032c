"""LLM inference serving: request sources, the serving simulator (continuous batching over a
paged KV cache) and its metrics; the iteration-time model and PD disaggregation build on them.
"""

from gpufabric.workloads.inference.requests import (Requests, bursty, closed_loop, load_trace,
                                                    offline, poisson)
from gpufabric.workloads.inference.simulator import (LinearCost, SchedulerConfig, SimResult,
                                                     simulate, summarize)

__all__ = ["Requests", "poisson", "bursty", "offline", "closed_loop", "load_trace",
           "SchedulerConfig", "SimResult", "LinearCost", "simulate", "summarize"]
