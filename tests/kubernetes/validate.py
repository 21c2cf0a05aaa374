"""Validates Kubernetes manifests offline, strictly: Kubernetes' own kinds against the
Kubernetes API's schemas (kubernetes-validate, rejecting unknown fields), the
prometheus-operator's (ServiceMonitor, PrometheusRule) against its CRDs' models
(cloudcoil-models-prometheus-operator), where a field the model does not know is an error
too. Prints one line per problem; exits 1 if there is any.

    python3 tests/kubernetes/validate.py FILE.yaml...
"""

import sys

import kubernetes_validate
import yaml
from cloudcoil.models.prometheus_operator import v1 as monitoring

OPERATOR_KINDS = {"ServiceMonitor": monitoring.ServiceMonitor, "PrometheusRule": monitoring.PrometheusRule}


def unknown_fields(given, kept, path=""):
    """The fields of `given` the model dropped (not in `kept`), by path."""
    if isinstance(given, dict):
        kept = kept if isinstance(kept, dict) else {}
        out = []
        for key, value in given.items():
            if key not in kept:
                out.append(f"{path}.{key}".lstrip("."))
            else:
                out += unknown_fields(value, kept[key], f"{path}.{key}")
        return out
    if isinstance(given, list):
        kept = kept if isinstance(kept, list) else []
        return [f for i, item in enumerate(given) for f in unknown_fields(item, kept[i] if i < len(kept) else None, f"{path}[{i}]")]
    return []


def check(document):
    kind = document.get("kind")
    if kind in OPERATOR_KINDS:
        model = OPERATOR_KINDS[kind].model_validate(document)
        kept = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
        return [f"unknown field {field}" for field in unknown_fields(document, kept)]
    try:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


def main(paths):
    problems = 0
    for path in paths:
        with open(path) as f:
            documents = [d for d in yaml.safe_load_all(f) if d]
        for document in documents:
            name = f"{path}: {document.get('kind')}/{document.get('metadata', {}).get('name')}"
            try:
                found = check(document)
            except Exception as error:  # the validators' own errors name the problem
                found = [str(error).replace("\n", " ")]
            for problem in found:
                print(f"{name}: {problem}")
                problems += 1
            if not found:
                print(f"{name}: valid")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
