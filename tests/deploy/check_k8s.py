#!/usr/bin/env python3
"""Renders deploy/k8s with `kubectl kustomize` and checks the objects against what
docs/operations.md promises: the kinds, one Recreate controller on its PVC, the worker
DaemonSet on GPU nodes with hostNetwork, offering the pod's GPUs (no --slots), probes on ports the
containers really serve, Secrets mounted where the flags point, and every flag in the
manifests accepted by the binary it is passed to (its --help lists it).

Exit status 0 when every check passes; otherwise each failure is printed and it is 1.
Needs PyYAML: ctest runs it with the tree's Python (TRAINYARD_PYTHON, the venv of
deploy/python-requirements.txt).
"""
import argparse
import re
import subprocess
import sys

import yaml

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def flag_values(args):
    """{'--flag': value} from ['--flag=value', ...] (a bare flag maps to True)."""
    out = {}
    for a in args:
        if not a.startswith("--"):
            continue
        name, eq, value = a.partition("=")
        out[name] = value if eq else True
    return out


def binary_flags(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", r.stdout + r.stderr))


def mounted_secret(pod_spec, container, path):
    """The Secret name whose mount holds `path`, or None."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        if path.startswith(m["mountPath"].rstrip("/") + "/"):
            v = volumes.get(m["name"], {})
            return v.get("secret", {}).get("secretName")
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kubectl", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--controller", required=True)
    p.add_argument("--worker", required=True)
    a = p.parse_args()

    r = subprocess.run([a.kubectl, "kustomize", a.base], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(f"kubectl kustomize {a.base} failed ({r.returncode}):\n{r.stderr}")
        return 1
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    expected_kinds = {"Namespace", "PersistentVolumeClaim", "Deployment", "Service", "NetworkPolicy",
                      "DaemonSet"}
    check(set(by_kind) == expected_kinds, f"kinds {sorted(by_kind)}, expected {sorted(expected_kinds)}")
    check("Secret" not in by_kind, "the base must not define Secrets (re-applying it would empty them)")
    for d in docs:
        md = d["metadata"]
        check(md.get("labels", {}).get("app.kubernetes.io/part-of") == "trainyard",
              f"{d['kind']}/{md['name']} lacks app.kubernetes.io/part-of=trainyard")
        if d["kind"] != "Namespace":
            check(md.get("namespace") == "trainyard", f"{d['kind']}/{md['name']} not in namespace trainyard")
    if failures:
        return report()

    # --- controller ---
    dep = by_kind["Deployment"][0]
    spec = dep["spec"]
    check(spec.get("replicas") == 1, f"controller replicas {spec.get('replicas')}, expected 1 (SQLite, one writer)")
    check(spec.get("strategy", {}).get("type") == "Recreate", "controller strategy is not Recreate")
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    check(c["command"] == ["trainyard-controller"], f"controller command {c['command']}")
    f = flag_values(c["args"])
    known = binary_flags(a.controller)
    for flag in f:
        check(flag in known, f"trainyard-controller does not know {flag} (not in its --help)")
    ports = {pt["name"]: pt["containerPort"] for pt in c["ports"]}
    check(f.get("--listen", "").endswith(f":{ports.get('grpc')}"), f"--listen {f.get('--listen')} vs grpc port {ports}")
    check(f.get("--metrics-listen", "").endswith(f":{ports.get('metrics')}"),
          f"--metrics-listen {f.get('--metrics-listen')} vs metrics port {ports}")
    # Secure by default: a non-loopback --listen with TLS and tokens.
    for flag in ("--tls-cert", "--tls-key", "--tls-ca", "--token-file"):
        check(flag in f, f"controller lacks {flag}")
        if flag in f:
            check(mounted_secret(pod, c, f[flag]) is not None, f"controller {flag}={f[flag]} is not on a Secret mount")
    pvcs = {x["metadata"]["name"] for x in by_kind["PersistentVolumeClaim"]}
    data = [m for m in c["volumeMounts"] if m["mountPath"] == f.get("--data-dir")]
    check(len(data) == 1, f"--data-dir {f.get('--data-dir')} is not a volume mount")
    if data:
        vol = {v["name"]: v for v in pod["volumes"]}[data[0]["name"]]
        check(vol.get("persistentVolumeClaim", {}).get("claimName") in pvcs, "--data-dir is not on the PVC")
    for probe in ("readinessProbe", "livenessProbe"):
        pr = c.get(probe, {})
        port = (pr.get("tcpSocket") or pr.get("grpc") or {}).get("port")
        check(port in ("grpc", ports.get("grpc")), f"controller {probe} is not on the gRPC port: {pr}")
    svc = by_kind["Service"][0]
    labels = spec["template"]["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "Service selector misses the controller")
    check({pt["targetPort"] for pt in svc["spec"]["ports"]} == {"grpc", "metrics"}, "Service ports")

    # --- worker ---
    ds = by_kind["DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    check(c["command"] == ["trainyard-worker"], f"worker command {c['command']}")
    check(pod.get("hostNetwork") is True, "worker lacks hostNetwork")
    check(pod.get("dnsPolicy") == "ClusterFirstWithHostNet", "worker dnsPolicy is not ClusterFirstWithHostNet")
    check(any(k.startswith("nvidia.com/gpu") for k in pod.get("nodeSelector", {})), "worker nodeSelector is not on GPU nodes")
    check(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])), "worker lacks the GPU toleration")
    f = flag_values(c["args"])
    known = binary_flags(a.worker)
    for flag in f:
        check(flag in known, f"trainyard-worker does not know {flag} (not in its --help)")
    # The worker offers the GPUs the device plugin gives the pod (NVML, --gpus all, its
    # default) and takes one slot per GPU: no --slots, which could only disagree.
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    check(gpus is not None and str(gpus).isdigit() and int(str(gpus)) > 0, f"worker asks for no GPUs: nvidia.com/gpu {gpus}")
    check(f.get("--gpus", "all") == "all", f"--gpus {f.get('--gpus')}: the pod's GPUs are chosen by nvidia.com/gpu, offer them all")
    check("--slots" not in f, f"--slots {f.get('--slots')}: with GPUs the worker takes one slot per GPU it is given")
    check("--nvml-library" not in f, "--nvml-library: the NVIDIA Container Toolkit mounts libnvidia-ml.so.1 where dlopen finds it")
    check(f.get("--controller", "").startswith("trainyard-controller.trainyard.svc:"), f"--controller {f.get('--controller')}")
    for flag in ("--tls-cert", "--tls-key", "--tls-ca"):
        check(flag in f and mounted_secret(pod, c, f[flag]) is not None, f"worker {flag} is not on a Secret mount")
    health = f.get("--health-listen", "")
    check(health.rpartition(":")[2].isdigit(), f"--health-listen {health!r} has no port")
    health_port = int(health.rpartition(":")[2]) if health.rpartition(":")[2].isdigit() else None
    # Beyond loopback (the kubelet probes the node's address) it needs --insecure.
    check("--insecure" in f, "a non-loopback --health-listen needs --insecure")
    for probe, service in (("readinessProbe", None), ("livenessProbe", "liveness")):
        g = c.get(probe, {}).get("grpc")
        check(g is not None and g.get("port") == health_port, f"worker {probe} is not a gRPC probe on {health_port}: {c.get(probe)}")
        if g is not None:
            check(g.get("service") == service, f"worker {probe} asks for service {g.get('service')!r}, expected {service!r}")

    secrets = set()
    for d in docs:
        for v in d.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "secret" in v:
                secrets.add(v["secret"]["secretName"])
    expected = {"trainyard-controller-tls", "trainyard-tokens", "trainyard-worker-tls"}
    check(secrets == expected, f"Secrets mounted {sorted(secrets)}, expected {sorted(expected)}")
    return report()


def report():
    if failures:
        for x in failures:
            print("FAIL:", x)
        return 1
    print("deploy/k8s renders: Namespace, PVC, controller Deployment (1, Recreate), Service, NetworkPolicy, "
          "worker DaemonSet (hostNetwork, the pod's GPUs offered through NVML, gRPC probes); every flag known to its binary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
