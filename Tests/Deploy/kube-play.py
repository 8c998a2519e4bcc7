#!/usr/bin/env python3
"""Turns deploy/kubernetes into what `podman kube play` (4.3) runs, for make deploy-test:

    python3 Tests/Deploy/kube-play.py MANIFESTS KEYS_DIR IMAGE OUT.yaml [--brokers N] [--scale-to M]
        [--single-broker-env]

What podman 4.3 cannot take is rewritten, and only that:
- StatefulSet: not supported by kube play. Each of the first N pods becomes a Pod named like the StatefulSet's pod
  (askrelay-broker-0 ...) from the pod template, with a PersistentVolumeClaim journal-askrelay-broker-<i> per pod
  (what the volume claim template makes on a cluster) and ASKRELAY_SHARD_NAME set to the pod's name (the template's
  fieldRef metadata.name).
- Service: not supported; the pods resolve each other by pod name on the podman network (aardvark-dns), so the
  broker list names tcp://askrelay-broker-<i>:5555 instead of the headless Service's
  askrelay-broker-<i>.askrelay-broker, in the ConfigMap and in the `sh -c` scripts of the containers (the broker's
  own list, the rebalance Job's lists).
- NetworkPolicy: not supported (podman has no policy enforcement); left out.
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

--scale-to M (more than N) also writes what `kubectl scale statefulset askrelay-broker --replicas=M` and the rebalance
Job (MANIFESTS/scaling/rebalance-job.yaml) make, each to play after OUT.yaml: OUT-scale.yaml, the pods
askrelay-broker-N ... -(M-1) with their claims (the ConfigMap keeps the N brokers, as before it is updated; it is
written alone to OUT-configmap.yaml for kube play's --configmap);
OUT-rebalance-up.yaml and OUT-rebalance-down.yaml, the Job's pod template as the Pods askrelay-rebalance-1 (from N to
M brokers, epoch 1) and askrelay-rebalance-2 (from M back to N, epoch 2), restartPolicy Never (a failure shows).
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
    parser.add_argument("--scale-to", type=int, default=0)
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
            # The headless Service's DNS names are pod names here.
            command = container.get("command", [])
            if len(command) >= 3 and command[1] == "-c":
                command[2] = command[2].replace(".askrelay-broker:", ":")
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

    def broker_pods(statefulset, pod_names):
        """The StatefulSet's pods of these names, each with its claims, as kube play takes them."""
        made = []
        template = statefulset["spec"]["template"]
        for name in pod_names:
            spec = pod_spec(template, name)
            for claim in statefulset["spec"]["volumeClaimTemplates"]:
                claim_name = f"{claim['metadata']['name']}-{name}"
                made.append(
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
            made.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "labels": template["metadata"]["labels"]},
                    "spec": spec,
                }
            )
        return made

    def write(path, documents):
        with open(path, "w") as stream:
            yaml.safe_dump_all(documents, stream, sort_keys=False)
        print(f"{path}: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in documents))

    for obj in objects:
        kind = obj["kind"]
        if kind in ("Service", "NetworkPolicy"):
            continue
        if kind == "ConfigMap" and obj["metadata"]["name"] == "askrelay-brokers":
            obj = copy.deepcopy(obj)
            obj["data"]["ASKRELAY_BROKERS"] = ",".join(f"{n}=tcp://{n}:5555" for n in names)
            if options.single_broker_env:
                obj["data"]["ASKRELAY_BROKER"] = f"tcp://{names[0]}:5555"
            out.append(obj)
        elif kind == "StatefulSet":
            out += broker_pods(obj, names)
        elif kind == "Deployment":
            obj = copy.deepcopy(obj)
            obj["spec"]["template"]["spec"] = pod_spec(obj["spec"]["template"], obj["metadata"]["name"])
            out.append(obj)
        else:
            out.append(obj)
    write(options.out, out)

    if options.scale_to > options.brokers:
        stem = options.out[: -len(".yaml")] if options.out.endswith(".yaml") else options.out
        statefulset = next(o for o in objects if o["kind"] == "StatefulSet")
        added = [f"askrelay-broker-{i}" for i in range(options.brokers, options.scale_to)]
        write(f"{stem}-scale.yaml", broker_pods(statefulset, added))
        # kube play resolves a ConfigMap of another file only when given it (--configmap).
        brokers_map = [o for o in out if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "askrelay-brokers"]
        write(f"{stem}-configmap.yaml", brokers_map)
        with open(os.path.join(options.manifests, "scaling", "rebalance-job.yaml")) as stream:
            job = next(d for d in yaml.safe_load_all(stream) if d and d["kind"] == "Job")
        for epoch, (direction, before, after) in enumerate(
            [("up", options.brokers, options.scale_to), ("down", options.scale_to, options.brokers)], start=1
        ):
            name = f"askrelay-rebalance-{epoch}"
            spec = pod_spec(job["spec"]["template"], name)
            spec["restartPolicy"] = "Never"
            values = {"FROM_REPLICAS": str(before), "TO_REPLICAS": str(after), "ASKRELAY_REBALANCE_EPOCH": str(epoch)}
            for container in spec["containers"]:
                for variable in container.get("env", []):
                    variable["value"] = values.get(variable["name"], variable.get("value"))
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": job["spec"]["template"]["metadata"]["labels"]},
                "spec": spec,
            }
            write(f"{stem}-rebalance-{direction}.yaml", [pod])


if __name__ == "__main__":
    main()
