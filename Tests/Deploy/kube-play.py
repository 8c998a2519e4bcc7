#!/usr/bin/env python3
"""Turns deploy/kubernetes into what `podman kube play` (4.3) runs, for make deploy-test:

    python3 Tests/Deploy/kube-play.py MANIFESTS KEYS_DIR IMAGE OUT.yaml [--brokers N] [--single-broker-env]

What podman 4.3 cannot take is rewritten, and only that:
- StatefulSet: not supported by kube play. Each of the first N pods becomes a Pod named like the StatefulSet's pod
  (askrelay-broker-0 ...) from the pod template, with a PersistentVolumeClaim journal-askrelay-broker-<i> per pod
  (what the volume claim template makes on a cluster) and ASKRELAY_SHARD_NAME set to the pod's name (the template's
  fieldRef metadata.name).
- Service: not supported; the pods resolve each other by pod name on the podman network (aardvark-dns), so the
  broker list names tcp://askrelay-broker-<i>:5555 instead of the headless Service's
  askrelay-broker-<i>.askrelay-broker.
- Secret askrelay-keys: podman 4.3 writes a Secret's `data` into the volume still base64-encoded, creates no file
  for `stringData`, and ignores `items` and fsGroup. So each secret volume becomes a hostPath folder next to OUT
  holding exactly the volume's items, copied from KEYS_DIR (the files `kubectl create secret generic
  --from-file=KEYS_DIR` puts in the Secret), readable by the pod's user (0444: fsGroup does that on a cluster).
- ConfigMap volumes: host folders as well (podman 4.3 leaves a subPath file of one unreadable to the pod's user).
- emptyDir volumes: renamed after their pod (podman 4.3 makes one named volume per volume name, shared by pods).
- ports: dropped (podman publishes every containerPort on the host; on a cluster they only name the ports).
- image: IMAGE, already in podman's store.
--single-broker-env also sets ASKRELAY_BROKER to the first broker, for executables without --brokers (before the
sharded broker list is merged).
"""

import argparse
import copy
import glob
import os
import shutil

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

    out = []
    names = [f"askrelay-broker-{i}" for i in range(options.brokers)]

    config_data = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}

    def pod_spec(template, pod):
        spec = copy.deepcopy(template["spec"])
        # ConfigMap volumes: files in a host folder too (podman 4.3 leaves a subPath file of one unreadable to the
        # pod's user); a subPath mount becomes a mount of that one file.
        for volume in spec.get("volumes", []):
            source = volume.pop("configMap", None)
            if source is None:
                continue
            folder = os.path.join(os.path.dirname(os.path.abspath(options.out)), f"config-{pod}-{volume['name']}")
            os.makedirs(folder, exist_ok=True)
            for key, text in config_data[source["name"]].items():
                with open(os.path.join(folder, key), "w") as stream:
                    stream.write(text)
                os.chmod(os.path.join(folder, key), 0o444)
            volume["hostPath"] = {"path": folder, "type": "Directory"}
            for container in spec["containers"]:
                for mount in container.get("volumeMounts", []):
                    if mount["name"] == volume["name"] and "subPath" in mount:
                        name = f"{volume['name']}-{len(spec['volumes'])}"
                        spec["volumes"].append(
                            {
                                "name": name,
                                "hostPath": {"path": os.path.join(folder, mount.pop("subPath")), "type": "File"},
                            }
                        )
                        mount["name"] = name
        for container in spec["containers"]:
            container["image"] = options.image
            container["imagePullPolicy"] = "Never"
            # podman publishes every containerPort on the host; on a cluster they only name the pod's ports.
            container.pop("ports", None)
        # emptyDir: podman 4.3 makes a named volume after the volume's name, shared by every pod using that name;
        # the pod's name in front keeps it the pod's own, as on a cluster.
        for volume in spec.get("volumes", []):
            if "emptyDir" in volume:
                for container in spec["containers"]:
                    for mount in container.get("volumeMounts", []):
                        if mount["name"] == volume["name"]:
                            mount["name"] = f"{pod}-{volume['name']}"
                volume["name"] = f"{pod}-{volume['name']}"
        for volume in spec.get("volumes", []):
            secret = volume.pop("secret", None)
            if secret is None:
                continue
            folder = os.path.join(os.path.dirname(os.path.abspath(options.out)), f"secret-{pod}-{volume['name']}")
            os.makedirs(folder, exist_ok=True)
            items = secret.get("items") or [{"key": n, "path": n} for n in sorted(os.listdir(options.keys))]
            for item in items:
                target = os.path.join(folder, item["path"])
                shutil.copyfile(os.path.join(options.keys, item["key"]), target)
                os.chmod(target, 0o444)
            volume["hostPath"] = {"path": folder, "type": "Directory"}
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
                spec = pod_spec(template, name)
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
            obj["spec"]["template"]["spec"] = pod_spec(obj["spec"]["template"], obj["metadata"]["name"])
            out.append(obj)
        else:
            out.append(obj)
    with open(options.out, "w") as stream:
        yaml.safe_dump_all(out, stream, sort_keys=False)
    print(f"{options.out}: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in out))


if __name__ == "__main__":
    main()
