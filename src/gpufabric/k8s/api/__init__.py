"""The kubelet device-plugin API v1beta1: our .proto and the modules protoc generates."""
