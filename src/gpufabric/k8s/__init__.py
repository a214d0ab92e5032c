"""Kubernetes front doors over the library: a scheduler extender, a GPU device plugin and
serving manifests.

- :mod:`~gpufabric.k8s.objects`: Pod and Node objects (GFD and openb labels) read into the
  scheduler layer's requests and node rows;
- :mod:`~gpufabric.k8s.extender`: the extender verbs (filter, prioritize, bind, preempt) over
  :mod:`gpufabric.scheduler`, and :mod:`~gpufabric.k8s.http` their HTTP server;
- :mod:`~gpufabric.k8s.deviceplugin`: the kubelet device-plugin v1beta1 gRPC server, its
  registration with the kubelet, and the devices it offers (NVML or a system description);
- :mod:`~gpufabric.k8s.manifests`: a serving design (``gpufabric recommend``'s) as vLLM or
  SGLang Deployment / LeaderWorkerSet manifests with the engines' documented flags;
- :mod:`~gpufabric.k8s.api`: the project's own ``deviceplugin.proto`` and the modules generated
  from it.

Placement stays in :mod:`gpufabric.scheduler`; these modules only translate.
"""
