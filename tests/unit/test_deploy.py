"""deploy/daemonset.yaml as a cluster would take it: every document valid against the Kubernetes schemas of
each version it claims (kubernetes-validate's bundled copies, strict: an unknown or misspelt field is an
error), scheduled only where the image runs, with no image but ours, read-only RBAC, and host-path
writes that work on SELinux-enforcing nodes."""
import json
import os
import re

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAEMONSET = os.path.join(ROOT, "deploy", "daemonset.yaml")
CLAIMED = (25, 37)      # "Schema-checked against Kubernetes 1.25 to 1.37" (the manifest's header says so)


def documents():
    with open(DAEMONSET, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def versions():
    latest = kubernetes_validate.latest_version()
    last = min(CLAIMED[1], int(str(latest).split(".")[1]))
    return [f"1.{m}.0" for m in range(CLAIMED[0], last + 1)]


def test_the_header_claims_the_versions_checked_here():
    with open(DAEMONSET, encoding="utf-8") as f:
        assert f"Schema-checked against Kubernetes 1.{CLAIMED[0]} to 1.{CLAIMED[1]}" in f.read()


@pytest.mark.parametrize("version", versions())
def test_every_document_is_valid_for_each_claimed_kubernetes_version(version):
    docs = documents()
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
                                          "DaemonSet"]
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']} is invalid for Kubernetes {version}: {e}")


def test_a_misspelt_field_fails_the_validation():
    """The check can fail: strict validation refuses a field Kubernetes does not know."""
    ds = documents()[-1]
    ds["spec"]["template"]["spec"]["nodeSelectr"] = ds["spec"]["template"]["spec"]["nodeSelector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, versions()[-1], strict=True)


def _pod():
    return documents()[-1]["spec"]["template"]["spec"]


def test_scheduled_only_on_linux_nodes_of_the_images_arch():
    pod = _pod()
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    with open(os.path.join(ROOT, "build", "bundle.py"), encoding="utf-8") as f:
        assert 'LOADER = "ld-linux-x86-64.so.2"' in f.read()   # what the image's bundle starts: amd64


def test_no_image_but_ours_and_nothing_fetched_at_run_time():
    pod = _pod()
    containers = pod.get("initContainers", []) + pod["containers"]
    assert [c["name"] for c in containers] == ["install-cni"]
    assert all(c["image"].rsplit("/", 1)[-1].startswith("skb-cni:") for c in containers)
    assert "kubectl" not in open(DAEMONSET, encoding="utf-8").read().replace("kubectl apply", "")
    env = {e["name"]: e for e in containers[0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--pod-cidr-from-api" in containers[0]["args"]


def test_rbac_is_get_on_nodes_only():
    role = documents()[1]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding, sa = documents()[2], documents()[0]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    assert _pod()["serviceAccountName"] == sa["metadata"]["name"]


def test_host_path_writes_work_on_selinux_enforcing_nodes():
    ctx = _pod()["containers"][0]["securityContext"]
    assert ctx["seLinuxOptions"] == {"type": "spc_t", "level": "s0"}
    assert ctx["readOnlyRootFilesystem"] and not ctx["allowPrivilegeEscalation"]
    assert ctx["capabilities"] == {"drop": ["ALL"]} and not ctx.get("privileged")
    text = open(DAEMONSET, encoding="utf-8").read()
    assert re.search(r"#.*container_t.*\n.*bin_t", text), "the reason is written beside it"


def test_template_offers_cni_1_1_0_and_takes_the_nodes_mtu():
    """libcni from v1.2 on picks 1.1.0 from cniVersions (so STATUS and GC reach the plugins); older libcni
    reads only cniVersion, 1.0.0 (tests/e2e/test_image.py runs podman 4 on it)."""
    from skb.install import conflist
    from skb.tool.libcni import conf as libcni_conf
    text = documents()[3]["data"]["10-skb.conflist.template"]
    assert '"mtu": ${MTU}' in text
    rendered = conflist.render(text, conflist.template_values(conflist.parse_pod_cidrs("10.244.1.0/24"), {"MTU": "1500"}))
    assert rendered["cniVersion"] == "1.0.0" and rendered["cniVersions"][-1] == "1.1.0"
    assert libcni_conf.conflist_from_bytes(json.dumps(rendered)).cni_version == "1.1.0"
