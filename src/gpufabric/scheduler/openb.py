"""The openb trace's vocabulary the scheduler's modules share: job kinds and QoS priorities."""

#: Job kinds; routing (see :mod:`gpufabric.scheduler.cluster`) sends each to its pools.
KINDS = ("training", "inference", "service", "batch")

#: openb ``qos`` -> priority (higher runs first and may preempt lower).
QOS_PRIORITY = {"Guaranteed": 3, "LS": 2, "Burstable": 1, "BE": 0, "": 0}
