#!/usr/bin/env python3
"""Turns deploy/kubernetes into what `podman kube play` (4.3) runs, for make deploy-test:

    python3 Tests/Deploy/kube-play.py MANIFESTS KEYS_DIR IMAGE OUT.yaml [--brokers N] [--single-broker-env]

What podman 4.3 cannot take is rewritten, and only that:
- StatefulSet: not supported by kube play. Each of the first N pods becomes a Pod named like the StatefulSet's pod
  (askrelay-broker-0 ...) from the pod template, with a PersistentVolumeClaim journal-askrelay-broker-<i> per pod
  (what the volume claim template makes on a cluster) and ASKRELAY_SHARD_NAME set to the pod's name (the template's
  fieldRef metadata.name).
- Service: not supported; the pods resolve each other by pod name on the podman network (aardvark-dns), so the
  broker list names tcp://askrelay-broker-<i>:5555 instead of the headless Service's askrelay-broker-<i>.askrelay-broker.
- Secret askrelay-keys: made here from KEYS_DIR (what `kubectl create secret generic --from-file` makes); secret
  volumes get `optional: false` (podman 4.3 dereferences a missing `optional`).
- image: IMAGE, already in podman's store.
--single-broker-env also sets ASKRELAY_BROKER to the first broker, for executables without --brokers (before the
sharded broker list is merged).
"""

import argparse
import base64
import copy
import glob
import os

import yaml


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("manifests")
    parser.add_argument("keys")
    parser.add_argument("image")
    parser.add_argument("out")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--single-broker-env", action="store_true")
    options = parser.parse_args()

    objects = []
    for path in sorted(glob.glob(os.path.join(options.manifests, "*.yaml"))):
        with open(path) as stream:
            objects += [d for d in yaml.safe_load_all(stream) if d]

    out = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "askrelay-keys"},
            "data": {
                name: base64.b64encode(open(os.path.join(options.keys, name), "rb").read()).decode()
                for name in sorted(os.listdir(options.keys))
            },
        }
    ]
    names = [f"askrelay-broker-{i}" for i in range(options.brokers)]

    def pod_spec(template):
        spec = copy.deepcopy(template["spec"])
        for container in spec["containers"]:
            container["image"] = options.image
            container["imagePullPolicy"] = "Never"
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                volume["secret"]["optional"] = False
        return spec

    for obj in objects:
        kind = obj["kind"]
        if kind == "Service":
            continue
        if kind == "ConfigMap" and obj["metadata"]["name"] == "askrelay-brokers":
            obj = copy.deepcopy(obj)
            obj["data"]["ASKRELAY_BROKERS"] = ",".join(f"{n}=tcp://{n}:5555" for n in names)
            if options.single_broker_env:
                obj["data"]["ASKRELAY_BROKER"] = f"tcp://{names[0]}:5555"
            out.append(obj)
        elif kind == "StatefulSet":
            template = obj["spec"]["template"]
            for name in names:
                spec = pod_spec(template)
                for claim in obj["spec"]["volumeClaimTemplates"]:
                    claim_name = f"{claim['metadata']['name']}-{name}"
                    out.append(
                        {
                            "apiVersion": "v1",
                            "kind": "PersistentVolumeClaim",
                            "metadata": {"name": claim_name},
                            "spec": claim["spec"],
                        }
                    )
                    spec.setdefault("volumes", []).append(
                        {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
                    )
                for container in spec["containers"]:
                    for variable in container.get("env", []):
                        field = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                        if field == "metadata.name":
                            variable.pop("valueFrom")
                            variable["value"] = name
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
                        "spec": spec,
                    }
                )
        elif kind == "Deployment":
            obj = copy.deepcopy(obj)
            obj["spec"]["template"]["spec"] = pod_spec(obj["spec"]["template"])
            out.append(obj)
        else:
            out.append(obj)
    with open(options.out, "w") as stream:
        yaml.safe_dump_all(out, stream, sort_keys=False)
    print(f"{options.out}: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in out))


if __name__ == "__main__":
    main()
