"""A minimal CRI client (what kubelet does to containerd for a pod's sandbox), over gRPC.

The stubs are the CRI ``runtime.v1`` API generated from Kubernetes' api.proto, as shipped by PyPI's
container-runtime-interface-api (package ``cri_api``); grpcio talks to containerd's socket, reached from
the test process through ``/proc/<sandbox pid 1>/root``.
"""
import uuid

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc


class CRIClient:
    def __init__(self, target, timeout=50):
        self.channel = grpc.insecure_channel(target)
        self.runtime = cri_grpc.RuntimeServiceStub(self.channel)
        self.images = cri_grpc.ImageServiceStub(self.channel)
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def version(self):
        return self.runtime.Version(cri.VersionRequest(version="v1"), timeout=self.timeout)

    def status(self):
        return self.runtime.Status(cri.StatusRequest(verbose=True), timeout=self.timeout)

    def pod_config(self, name, cgroup_parent, namespace="default"):
        uid = str(uuid.uuid4())
        return cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            hostname=name,
            log_directory=f"/var/log/pods/{namespace}_{name}_{uid}",
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.POD, pid=cri.CONTAINER, ipc=cri.POD))))

    def run_pod(self, config):
        return self.runtime.RunPodSandbox(cri.RunPodSandboxRequest(config=config), timeout=self.timeout).pod_sandbox_id

    def pod_status(self, pod_id):
        return self.runtime.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True),
                                             timeout=self.timeout)

    def stop_pod(self, pod_id):
        self.runtime.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=self.timeout)

    def remove_pod(self, pod_id):
        self.runtime.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=self.timeout)

    def list_pods(self):
        return list(self.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=self.timeout).items)
