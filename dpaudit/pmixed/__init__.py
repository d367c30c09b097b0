"""PMixED (Flemings et al. 2024): private prediction from an ensemble, as a deployment that answers only the
way its guarantee covers, and its audit (docs/methods.md, "PMixED").

    from dpaudit.pmixed import Deployment, evaluate_deployment

    dep = Deployment.load("reports/pmixed/pmixed-eps8/checkpoint")   # a folder written by `dpaudit run`
    print(dep.generate("Hello, how", max_new_tokens=8))              # 8 queries of the budget T
    print(dep.ledger.remaining)
    report = evaluate_deployment("reports/pmixed/pmixed-eps8/checkpoint")  # the report.json dict
"""

from __future__ import annotations


def __getattr__(name: str):  # torch and transformers load on first use
    if name == "Deployment":
        from dpaudit.pmixed.deployment import Deployment

        return Deployment
    if name == "evaluate_deployment":
        from dpaudit.pmixed.steps import evaluate_deployment

        return evaluate_deployment
    raise AttributeError(name)


__all__ = ["Deployment", "evaluate_deployment"]
