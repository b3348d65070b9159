"""Building blocks of the conformance cases each upstream scenario declares
(`Play.conformance_cases`): a metadata-only record and a scripted episode. `runtime.conformance`
plays every declared case through upstream's own environments and ours and compares them."""
from __future__ import annotations

CATEGORIES = ["Cat.", "Dog.", "Cow.", "Pig."]     # the answer is "Dog."


def record(config: str, name: str, **fields) -> dict:
    """A record of `config` (keyed `<config>/<name>`) with four categories, answer "Dog."."""
    built = {"id": 0, "key": f"{config}/{name}", "image_template": "x/{image}",
             "prompt": "What is shown?", "categories": list(CATEGORIES), "answer": "Dog."}
    built.update(fields)
    return built


def case(name: str, record: dict, answers: list[str], mode: str = "mcqa", hint: bool = False,
         random_suggestions: bool = False) -> dict:
    """One scripted episode: the answers given turn by turn (until the episode ends)."""
    return {"name": name, "record": record, "answers": answers, "mode": mode, "hint": hint,
            "random": random_suggestions}


FOREIGN = "<probe option naming {action}>"


def foreign(action: str) -> str:
    """A placeholder for another scenario's suggestion naming `action` in a random-suggestion
    record: `runtime.conformance` puts the first such option of the probe's fixed pool in its
    place, so no scenario writes another's option texts."""
    return FOREIGN.format(action=action)
