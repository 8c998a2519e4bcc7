#!/usr/bin/env python3
"""Validates the Kubernetes manifests offline (no cluster): every object against the Kubernetes API schema, the
rules the deployment relies on, and every flag and ASKRELAY_* variable against the executables' --help.

    python3 Tests/Deploy/validate-manifests.py [--bin .build/release] deploy/kubernetes

Reads FOLDER/*.yaml and FOLDER/*/*.yaml (scaling/rebalance-job.yaml). A container whose command is a `sh -c` script
ending in `exec "$@"` runs its args: those are checked as the command line, and a variable the script itself reads is
allowed besides the executable's own.

Schema: the models of PyPI's `kubernetes` client (pydantic, generated from the API's OpenAPI document): unknown
fields, wrong types and missing required fields fail; field names must be the API's own (camelCase). Prints one
line per object; exit 0 when everything holds, 1 with one line per problem otherwise, 64 for bad usage.
Run by `make test` (Tests/IntegrationTests/KubernetesManifestTests.swift); `make test-deps` installs the package into .build/venv, which the test runs this in.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import typing

try:
    import yaml
    import kubernetes.client as k8s
except ImportError as error:
    sys.exit(f"validate-manifests: {error}; install with `make test-deps` (kubernetes==37.0.2 into .build/venv)")

PRIMITIVES = {"str", "int", "bool", "float", "object", "datetime", "date", "bytearray"}


def model_for(document):
    """The client's model class of an object: apiVersion apps/v1, kind StatefulSet -> V1StatefulSet."""
    version = str(document.get("apiVersion", "")).split("/")[-1]
    name = version[:1].upper() + version[1:] + str(document.get("kind", ""))
    return getattr(k8s, name, None)


def unknown_names(cls, value, path):
    """Field names the API does not know (the models would also accept their snake_case Python names)."""
    problems = []
    if not isinstance(value, dict):
        return problems
    names = {alias: attribute for attribute, alias in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in names:
            problems.append(f"{path}.{key}: not a field of {cls.__name__}")
            continue
        problems += unknown_in_type(cls.openapi_types[names[key]], item, f"{path}.{key}")
    return problems


def unknown_in_type(kind, value, path):
    if kind in PRIMITIVES or kind.startswith("Dict["):
        return []
    match = re.fullmatch(r"List\[(.+)\]", kind)
    if match:
        return [p for i, v in enumerate(value or []) for p in unknown_in_type(match.group(1), v, f"{path}[{i}]")]
    cls = getattr(k8s, kind, None)
    return unknown_names(cls, value, path) if cls is not None else []


def schema_problems(document, where):
    cls = model_for(document)
    if cls is None:
        return [f"{where}: no Kubernetes API type {document.get('apiVersion')} {document.get('kind')}"]
    problems = unknown_names(cls, document, where)
    try:
        cls.model_validate(document)
    except Exception as error:  # pydantic.ValidationError: one entry per wrong field
        for entry in getattr(error, "errors", lambda: [{"loc": (), "msg": str(error)}])():
            location = ".".join(str(part) for part in entry["loc"])
            problems.append(f"{where}: {location}: {entry['msg']}")
    return problems


def pod_templates(objects, kinds=("Deployment", "StatefulSet")):
    for obj in objects:
        if obj["kind"] in kinds:
            yield obj, obj["spec"]["template"]


def wrapper_script(container):
    """The script of a `sh -c SCRIPT NAME` command that ends in `exec "$@"` (so the args are what runs), else None."""
    command = container.get("command", [])
    if len(command) >= 3 and command[0] in ("sh", "/bin/sh") and command[1] == "-c":
        if command[2].rstrip().endswith('exec "$@"'):
            return command[2]
    return None


def rule_problems(objects):
    """What the deployment relies on beyond the schema (issue 17 §3, docs/deployment.md "Kubernetes")."""
    problems = []
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    config_maps = by_kind.get("ConfigMap", {})
    services = by_kind.get("Service", {})
    brokers = by_kind.get("StatefulSet", {}).get("askrelay-broker")
    if brokers is None:
        return ["no StatefulSet askrelay-broker"]
    spec = brokers["spec"]
    service = services.get(spec["serviceName"])
    if service is None or service["spec"].get("clusterIP") != "None":
        problems.append(f"StatefulSet askrelay-broker: serviceName {spec['serviceName']} is not a headless Service")
    elif service["spec"].get("selector") != spec["template"]["metadata"]["labels"]:
        problems.append("Service askrelay-broker: its selector is not the broker pods' labels")
    if not spec.get("volumeClaimTemplates"):
        problems.append("StatefulSet askrelay-broker: no volume claim template for the journal")
    # The broker list names the StatefulSet's pods, in order, at their stable DNS names.
    listed = config_maps.get("askrelay-brokers", {}).get("data", {}).get("ASKRELAY_BROKERS", "")
    expected = ",".join(
        f"askrelay-broker-{i}=tcp://askrelay-broker-{i}.{spec['serviceName']}:5555" for i in range(spec["replicas"])
    )
    if listed != expected:
        problems.append(f"ConfigMap askrelay-brokers: ASKRELAY_BROKERS is {listed!r}, the pods are {expected!r}")
    shard = [e for e in spec["template"]["spec"]["containers"][0].get("env", []) if e["name"] == "ASKRELAY_SHARD_NAME"]
    if not shard or shard[0].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
        problems.append("StatefulSet askrelay-broker: ASKRELAY_SHARD_NAME is not the pod's name")
    # Scaling (docs/deployment.md, "Scaling the brokers"): every broker has an admin endpoint behind the Service, a
    # pod's own shard is in its own list (the wrapper), and the rebalance Job's pods are the ones the NetworkPolicy
    # lets reach it.
    broker = spec["template"]["spec"]["containers"][0]
    if "--admin-endpoint" not in broker.get("args", []):
        problems.append("StatefulSet askrelay-broker: the broker has no --admin-endpoint (askrelay rebalance needs it)")
    if service is not None and 5557 not in [p.get("port") for p in service["spec"].get("ports", [])]:
        problems.append(f"Service {spec['serviceName']}: no port 5557 (the brokers' admin endpoints)")
    for container in spec["template"]["spec"]["containers"]:
        script = wrapper_script(container) or ""
        if "$ASKRELAY_SHARD_NAME=" not in script:
            problems.append(
                f"StatefulSet askrelay-broker container {container['name']}: its list does not add the pod itself "
                "(a scale-up adds pods that ASKRELAY_BROKERS does not list yet)"
            )
    job = by_kind.get("Job", {}).get("askrelay-rebalance")
    policy = by_kind.get("NetworkPolicy", {}).get("askrelay-broker-admin")
    if job is None:
        problems.append("no Job askrelay-rebalance (scaling/rebalance-job.yaml)")
    elif policy is not None:
        allowed = [
            peer.get("podSelector", {}).get("matchLabels", {})
            for rule in policy["spec"].get("ingress", [])
            if 5557 in [p.get("port") for p in rule.get("ports", [])]
            for peer in rule.get("from", [])
        ]
        labels = job["spec"]["template"]["metadata"].get("labels", {})
        if not any(selector and all(labels.get(k) == v for k, v in selector.items()) for selector in allowed):
            problems.append("NetworkPolicy askrelay-broker-admin: the rebalance Job's pods may not reach port 5557")
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    for obj, template in pod_templates(objects):
        name = f"{obj['kind']} {obj['metadata']['name']}"
        pod = template["spec"]
        selector = obj["spec"]["selector"].get("matchLabels", {})
        if any(template["metadata"].get("labels", {}).get(k) != v for k, v in selector.items()):
            problems.append(f"{name}: the selector does not match the pod template's labels")
        if pod.get("terminationGracePeriodSeconds", 0) < 10:
            problems.append(f"{name}: terminationGracePeriodSeconds below 10 s leaves no time for the SIGTERM drain")
        volumes = {v["name"] for v in pod.get("volumes", [])} | (claims if obj is brokers else set())
        for container in pod["containers"]:
            where = f"{name} container {container['name']}"
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in container:
                    problems.append(f"{where}: no {probe}")
            requests = container.get("resources", {}).get("requests", {})
            if not {"cpu", "memory"} <= set(requests):
                problems.append(f"{where}: resources.requests needs cpu and memory")
            if {"configMapRef": {"name": "askrelay-brokers"}} not in container.get("envFrom", []):
                problems.append(f"{where}: does not read the broker list (envFrom configMapRef askrelay-brokers)")
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in volumes:
                    problems.append(f"{where}: mounts {mount['name']}, which is no volume of the pod")
            if pod.get("securityContext", {}).get("runAsNonRoot") is not True:
                problems.append(f"{name}: runAsNonRoot is not set")
    return problems



def flag_problems(objects, bin_dir, notes):
    problems = []
    helps = {}

    def help_of(executable):
        if executable not in helps:
            path = os.path.join(bin_dir, executable)
            run = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
            if run.returncode != 0:
                raise SystemExit(f"validate-manifests: {path} --help exited {run.returncode}: {run.stderr.strip()}")
            flags = {line.split()[0] for line in run.stdout.splitlines() if line.startswith("  --")}
            helps[executable] = (flags, set(re.findall(r"env: (ASKRELAY_[A-Z0-9_]+)", run.stdout)))
        return helps[executable]

    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    for obj, template in pod_templates(objects, ("Deployment", "StatefulSet", "Job")):
        for container in template["spec"]["containers"]:
            where = f"{obj['kind']} {obj['metadata']['name']}"
            script = wrapper_script(container)
            args = (container.get("command", []) if script is None else []) + container.get("args", [])
            script_reads = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", script or ""))
            executable = args[0]
            if len(args) > 1 and executable == "askrelay" and not args[1].startswith("-"):
                # A subcommand (askrelay rebalance): its own --help lists its flags and variables.
                helps.setdefault(f"askrelay {args[1]}", subcommand_help(["askrelay", args[1]], bin_dir, variables=True))
                executable = f"askrelay {args[1]}"
                args = [executable] + args[2:]
            flags, variables = help_of(executable)
            for flag in (a for a in args[1:] if a.startswith("--")):
                if flag not in flags:
                    problems.append(f"{where}: {executable} --help does not list {flag}")
            names = [e["name"] for e in container.get("env", [])]
            for source in container.get("envFrom", []):
                names += list(config_maps.get(source.get("configMapRef", {}).get("name"), {}).get("data", {}))
            for name in names:
                if name in variables or name in script_reads:
                    continue
                problems.append(f"{where}: {executable} reads no {name} (its --help lists no such variable)")
            for probe in ("readinessProbe", "livenessProbe"):
                command = container.get(probe, {}).get("exec", {}).get("command")
                if command:
                    probe_flags, _ = help_of(command[0]) if len(command) < 2 else subcommand_help(command, bin_dir)
                    for flag in (a for a in command if a.startswith("--")):
                        if flag not in probe_flags:
                            problems.append(f"{where} {probe}: {' '.join(command[:2])} --help does not list {flag}")
    return problems


def subcommand_help(command, bin_dir, variables=False):
    run = subprocess.run(
        [os.path.join(bin_dir, command[0]), command[1], "--help"], capture_output=True, text=True, timeout=30
    )
    if run.returncode != 0:
        raise SystemExit(f"validate-manifests: {command[0]} {command[1]} --help exited {run.returncode}: {run.stderr}")
    flags = {line.split()[0] for line in run.stdout.splitlines() if line.startswith("  --")}
    return flags, set(re.findall(r"env: (ASKRELAY_[A-Z0-9_]+)", run.stdout)) if variables else set()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the manifests' folder (deploy/kubernetes)")
    parser.add_argument("--bin", help="folder of the built executables: check flags and variables against --help")
    options = parser.parse_args()
    files = sorted(glob.glob(os.path.join(options.folder, "*.yaml"))) + sorted(
        glob.glob(os.path.join(options.folder, "*", "*.yaml"))
    )
    if not files:
        print(f"validate-manifests: no *.yaml in {options.folder}", file=sys.stderr)
        sys.exit(64)
    objects, problems = [], []
    for path in files:
        with open(path) as stream:
            for index, document in enumerate(yaml.safe_load_all(stream)):
                if document is None:
                    continue
                where = f"{os.path.relpath(path, options.folder)}[{index}] {document.get('kind')}/" + str(
                    document.get("metadata", {}).get("name")
                )
                found = schema_problems(document, where)
                problems += found
                print(f"{'FAIL' if found else 'ok  '} {where}")
                objects.append(document)
    if not problems:
        problems += rule_problems(objects)
    notes = set()
    if not problems and options.bin:
        problems += flag_problems(objects, options.bin, notes)
    for note in sorted(notes):
        print(f"note: {note}")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    print(f"{len(objects)} objects in {len(files)} files: {'valid' if not problems else f'{len(problems)} problems'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
