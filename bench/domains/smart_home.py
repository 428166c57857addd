"""A second domain for the label checks: a smart-home agent's catalogue and labelled rows.

Written for the benchmark and the tests, as another team would bring them: its own tools
(lights, thermostat, music, locks, sensors), English only, keywords as people write them
(imperfect: "degrees" names the thermostat, yet a sensor reading says "19 degrees"; "reading"
names the sensor, yet a later step's thought reports the reading), thoughts that report an
earlier step's result before committing to their own. `rows(seed)` draws the clean rows;
nothing here knows the label rules.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import planting
from toolgrpo.schemas.catalogue import Catalogue

Row = dict[str, Any]
ROOMS = ["living_room", "kitchen", "bedroom", "bathroom", "office", "hallway"]
DOORS = ["front", "back", "garage", "patio"]
PLAYLISTS = ["jazz", "lo-fi", "classical", "rock", "ambient", "podcasts"]
SENSORS = ["temperature", "humidity", "motion"]
_ROOM = {"type": "string", "enum": ROOMS}
_DOOR = {"type": "string", "enum": DOORS}


def _tool(name: str, description: str, keywords: list[str], params: dict, required: list[str]):
    schema = {"type": "object", "properties": params, "required": required}
    schema["additionalProperties"] = False
    return {"name": name, "description": {"en": description}, "keywords": {"en": keywords}} | {
        "params": schema
    }


CATALOGUE: dict[str, Any] = {
    "version": 1,
    "assistant": "a smart-home assistant",
    "tools": [
        _tool(
            "lights_on",
            "Turn a room's lights on, optionally at a brightness.",
            ["lights on", "turn on the light", "switch on", "brighten", "lamp"],
            {
                "room": _ROOM,
                "brightness": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "x-keywords": ["%", "percent", "brightness"],
                },
            },
            ["room"],
        ),
        _tool(
            "lights_off",
            "Turn a room's lights off.",
            ["lights off", "turn off the light", "switch off", "dark"],
            {"room": _ROOM},
            ["room"],
        ),
        _tool(
            "set_thermostat",
            "Set a room's target temperature.",
            ["thermostat", "heating", "warmer", "cooler", "degrees"],
            {
                "room": _ROOM,
                # no unit words: "set the heating to 24" says no "degrees"
                "temperature": {"type": "number", "minimum": 10, "maximum": 30},
                "mode": {
                    "type": "string",
                    "enum": ["heat", "cool", "auto"],
                    "x-keywords": {"heat": ["heat", "warm up"], "cool": ["cool", "air con"]},
                },
            },
            ["room", "temperature"],
        ),
        _tool(
            "play_music",
            "Play a playlist in a room.",
            ["play", "music", "playlist", "song"],
            {
                "room": _ROOM,
                "playlist": {"type": "string", "minLength": 1},
                "volume": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10,
                    "x-keywords": ["volume"],
                },
            },
            ["room", "playlist"],
        ),
        _tool(
            "stop_music",
            "Stop the music in a room.",
            ["stop the music", "pause", "quiet"],
            {"room": _ROOM},
            ["room"],
        ),
        _tool(
            "move_music",
            "Move what is playing from one room to another.",
            ["move the music", "follow me"],
            {"from_room": _ROOM, "to_room": _ROOM},
            ["from_room", "to_room"],
        ),
        _tool("lock_door", "Lock a door.", ["lock", "secure"], {"door": _DOOR}, ["door"]),
        _tool("unlock_door", "Unlock a door.", ["unlock", "let in"], {"door": _DOOR}, ["door"]),
        _tool(
            "read_sensor",
            "Read a room's sensor.",
            ["reading", "sensor", "temperature", "humidity", "motion"],
            {
                "room": _ROOM,
                # tuned once the first planted run showed "below 18 degrees" naming no sensor
                "sensor": {
                    "type": "string",
                    "enum": SENSORS,
                    "x-keywords": {
                        "temperature": ["temperature", "degree", "warm", "cold"],
                        "humidity": ["humid"],
                        "motion": ["motion", "anyone"],
                    },
                },
            },
            ["room", "sensor"],
        ),
        _tool(
            "respond",
            "Reply to the user without acting.",
            ["cannot", "can't", "sorry"],
            {"message": {"type": "string", "minLength": 1}},
            ["message"],
        ),
    ],
}


# One tuning pass, as a team makes it after reading the first planted run's misses (requests
# written "light up the office", "kill the lights", "open the back door for the cleaner").
TUNED_KEYWORDS = {
    "lights_on": ["light up"],
    "lights_off": ["kill the lights"],
    "unlock_door": ["open the door"],
}


def catalogue_values(tuned: bool = True) -> dict[str, Any]:
    """The catalogue as its JSON file holds it: the team's first keywords, or with
    `TUNED_KEYWORDS` added."""
    values = json.loads(json.dumps(CATALOGUE))
    for tool in values["tools"] if tuned else []:
        tool["keywords"]["en"] += TUNED_KEYWORDS.get(tool["name"], [])
    return values


def catalogue(tuned: bool = True) -> Catalogue:
    return Catalogue.model_validate(catalogue_values(tuned))


def write_catalogue(path: Path, tuned: bool = True) -> Path:
    path.write_text(json.dumps(catalogue_values(tuned), indent=2) + "\n")
    return path


def _room(name: str) -> str:
    return name.replace("_", " ")


# --- one step: (tool, params, what the request says, thought, plan item, observation) ---------

Step = tuple[str, dict[str, Any], str, str, str, str]


def _lights_on(rng: random.Random) -> Step:
    room = rng.choice(ROOMS)
    r = _room(room)
    if rng.random() < 0.5:
        level = rng.choice([20, 30, 40, 60, 75, 80])
        said = rng.choice([f"set the {r} lights to {level}%", f"dim the {r} lamp to {level}%"])
        params = {"room": room, "brightness": level}
    else:
        said = rng.choice(
            [f"turn on the {r} lights", f"switch the {r} lights on", f"light up the {r}"]
        )
        params = {"room": room}
    thought = rng.choice(
        [
            f"The user wants light in the {r}, so I switch the lights on.",
            f"So now I turn on the lights in the {r}.",
            f"The {r} should be bright, so I brighten it.",
        ]
    )
    return (
        "lights_on",
        params,
        said,
        thought,
        f"turn the lights on in the {r}",
        f"the {r} lights are on",
    )


def _lights_off(rng: random.Random) -> Step:
    room = rng.choice(ROOMS)
    r = _room(room)
    said = rng.choice(
        [f"turn off the {r} lights", f"switch the {r} lights off", f"kill the lights in the {r}"]
    )
    thought = rng.choice(
        [
            f"The user wants the {r} dark, so I switch the lights off.",
            f"Now I turn off the lights in the {r}.",
        ]
    )
    return (
        "lights_off",
        {"room": room},
        said,
        thought,
        f"turn the lights off in the {r}",
        f"the {r} lights are off",
    )


def _thermostat(rng: random.Random) -> Step:
    room = rng.choice(ROOMS)
    r = _room(room)
    degrees = rng.choice([18, 19, 20, 21, 22, 23, 24, 25, 21.5, 22.5])
    d = f"{degrees:g}"
    params: dict[str, Any] = {"room": room, "temperature": degrees}
    said = rng.choice(
        [
            f"set the {r} to {d} degrees",
            f"make the {r} {d} degrees",
            f"set the thermostat in the {r} to {d}°",
            f"I want the {r} at {d} degrees",
        ]
    )
    if rng.random() < 0.3:
        said = f"I'm cold, heat the {r} to {d} degrees"
        params["mode"] = "heat"
    thought = rng.choice(
        [
            f"The user wants {d} degrees in the {r}, so I set the thermostat.",
            f"So I adjust the heating in the {r} to {d}.",
            f"Now I set the {r} to {d} degrees.",
        ]
    )
    return (
        "set_thermostat",
        params,
        said,
        thought,
        f"set the thermostat to {d}",
        f"the {r} is set to {d} degrees",
    )


def _play(rng: random.Random) -> Step:
    room, playlist = rng.choice(ROOMS), rng.choice(PLAYLISTS)
    r = _room(room)
    params: dict[str, Any] = {"room": room, "playlist": playlist}
    said = rng.choice([f"play {playlist} in the {r}", f"put some {playlist} on in the {r}"])
    if rng.random() < 0.4:
        volume = rng.randint(2, 8)
        said += rng.choice([f" at volume {volume}", f", volume {volume}"])
        params["volume"] = volume
    thought = rng.choice(
        [
            f"The user wants {playlist} in the {r}, so I play it.",
            f"Now I start the {playlist} playlist in the {r}.",
        ]
    )
    return (
        "play_music",
        params,
        said,
        thought,
        f"play {playlist}",
        f"{playlist} is playing in the {r}",
    )


def _stop(rng: random.Random) -> Step:
    room = rng.choice(ROOMS)
    r = _room(room)
    said = rng.choice(
        [f"stop the music in the {r}", f"pause the {r} speaker", f"make the {r} quiet"]
    )
    thought = rng.choice(
        [f"The user wants quiet in the {r}, so I stop the music.", f"Now I pause the {r} speaker."]
    )
    return (
        "stop_music",
        {"room": room},
        said,
        thought,
        f"stop the music in the {r}",
        f"the {r} is quiet",
    )


def _move(rng: random.Random) -> Step:
    source, target = rng.sample(ROOMS, 2)
    s, t = _room(source), _room(target)
    said = rng.choice(
        [
            f"move the music from the {s} to the {t}",
            f"I'm going to the {t}, move the music from the {s}",
        ]
    )
    thought = f"So I move the music from the {s} to the {t}."
    params = {"from_room": source, "to_room": target}
    return (
        "move_music",
        params,
        said,
        thought,
        f"move the music to the {t}",
        f"the music moved to the {t}",
    )


def _lock(rng: random.Random) -> Step:
    door = rng.choice(DOORS)
    said = rng.choice([f"lock the {door} door", f"make sure the {door} door is locked"])
    thought = rng.choice(
        [f"The user wants the {door} door secured, so I lock it.", f"Now I lock the {door} door."]
    )
    return (
        "lock_door",
        {"door": door},
        said,
        thought,
        f"lock the {door} door",
        f"the {door} door is locked",
    )


def _unlock(rng: random.Random) -> Step:
    door = rng.choice(DOORS)
    said = rng.choice([f"unlock the {door} door", f"open the {door} door for the cleaner"])
    thought = rng.choice(
        [f"The cleaner needs in, so I unlock the {door} door.", f"Now I unlock the {door} door."]
    )
    return (
        "unlock_door",
        {"door": door},
        said,
        thought,
        f"unlock the {door} door",
        f"the {door} door is unlocked",
    )


def _reading(
    rng: random.Random, sensor: str | None = None, around: float = 21
) -> tuple[Step, float]:
    room = rng.choice(ROOMS)
    r = _room(room)
    sensor = sensor or rng.choice(SENSORS)
    said = {
        "temperature": rng.choice([f"check the temperature in the {r}", f"how warm is the {r}"]),
        "humidity": f"what's the humidity in the {r}",
        "motion": f"is there any motion in the {r}",
    }[sensor]
    value = (
        round(around + rng.uniform(-5, 4), 1) if sensor == "temperature" else rng.randint(30, 70)
    )
    seen = {
        "temperature": f"{r} {value:g} degrees",
        "humidity": f"{r} humidity {value:g}%",
        "motion": f"{r} no motion",
    }[sensor]
    thought = rng.choice(
        [
            f"First I read the {sensor} sensor in the {r}.",
            f"The user asks about the {r}, so I check the sensor.",
        ]
    )
    params = {"room": room, "sensor": sensor}
    return ("read_sensor", params, said, thought, f"read the {r} {sensor}", seen), value


SINGLE_STEPS: list[Callable[[random.Random], Step]] = [
    _lights_on,
    _lights_off,
    _thermostat,
    _play,
    _stop,
    _move,
    _lock,
    _unlock,
    lambda rng: _reading(rng)[0],
]
_OFF_TOPIC = [
    ("Order me a pizza.", "Sorry, I can only run the devices in your home."),
    ("What's the weather in Paris?", "Sorry, I cannot look that up; I run your home's devices."),
    ("Book a table for two tonight.", "Sorry, I can't book tables; I run your home's devices."),
]
_JOINERS = [", then ", " and ", ", and after that ", "; then "]


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def _solution(tool: str, params: dict[str, Any], thought: str, plan: list[str]) -> str:
    answer = {"thought": thought, "action": {"tool": tool, "params": params}, "plan": plan}
    return json.dumps(answer)


def _scenario_rows(
    scenario_id: str, request: str, steps: list[Step], condition: str | None = None
) -> list[Row]:
    rows, history = [], []
    for index, (tool, params, _, thought, _, seen) in enumerate(steps):
        step = index + 1
        prompt = request + ("\n\nPrevious steps:\n" + "\n".join(history) if history else "")
        plan = [item for *_, item, _ in steps[index:]]
        row = {
            "id": f"{scenario_id}-{step}" if len(steps) > 1 else scenario_id,
            "scenario_id": scenario_id,
            "kind": "multi" if len(steps) > 1 else "single",
            "lang": "en",
            "step": step,
            "n_steps": len(steps),
            "prompt": prompt,
            "solution": _solution(tool, params, thought, plan),
            "tool": tool,
        }
        if condition is not None and step == len(steps):
            row["condition"] = condition
        rows.append(row)
        history.append(f"Step {step}: {tool} → {seen}")
    return rows


def _later(step: Step, done: Step, rng: random.Random) -> Step:
    """A later step whose thought reports the step done before it, then commits to its own
    (at times in words the keywords miss: "so I carry on")."""
    tool, params, said, _, item, seen = step
    report = done[5][0].upper() + done[5][1:]
    thought = rng.choice(
        [
            f"{report}, so now I {item}.",
            f"{report}. Next I {item}.",
            f"Done: {report.lower()}; then I {item}.",
            f"{report}, and the user asked for more, so I carry on.",
        ]
    )
    return tool, params, said, thought, item, seen


def _reading_then_thermostat(rng: random.Random) -> list[Step]:
    """Read the temperature, then set it: the issue's "The reading is in, now …" thoughts."""
    (reading, value) = _reading(rng, "temperature")
    room = reading[1]["room"]
    r = _room(room)
    degrees = rng.choice([19, 20, 21, 22, 23, 24])
    said = rng.choice([f"then set it to {degrees} degrees", f"then make it {degrees} degrees"])
    thought = rng.choice(
        [
            f"The reading is in, now the user wants {degrees} degrees, so I set the thermostat.",
            f"The sensor says {value:g} degrees; the user wants {degrees}, so I change it.",
            f"Got the reading of {value:g} degrees, so now I set the {r} to {degrees}.",
        ]
    )
    setting = (
        "set_thermostat",
        {"room": room, "temperature": degrees},
        said,
        thought,
        f"set the thermostat to {degrees}",
        f"the {r} is set to {degrees} degrees",
    )
    return [reading, setting]


def _conditional(rng: random.Random) -> tuple[str, list[Step], str]:
    """ "If the bedroom is below 19 degrees, heat it to 22": read, then act or reply."""
    limit = rng.choice([18, 19, 20, 21, 22])
    (reading, value) = _reading(rng, "temperature", around=limit)
    room = reading[1]["room"]
    r = _room(room)
    degrees = limit + rng.choice([2, 3])
    request = _sentence(f"if the {r} is below {limit} degrees, set the heating to {degrees}")
    if value < limit:
        thought = f"The reading is {value:g} degrees, below {limit}, so now I set the heating."
        act = (
            "set_thermostat",
            {"room": room, "temperature": degrees, "mode": "heat"},
            "",
            thought,
            f"heat to {degrees}",
            "",
        )
        return request, [reading, act], "holds"
    thought = f"The reading is {value:g} degrees, not below {limit}, so I tell the user."
    message = f"The {r} is already at {value:g} degrees, so I left the heating alone."
    reply = ("respond", {"message": message}, "", thought, "tell the user", "")
    return request, [reading, reply], "fails"


def rows(seed: int = 0, singles: int = 300, multis: int = 180) -> list[Row]:
    """The domain's clean rows: single-step requests (some off-topic), and two- and three-step
    scenarios (some conditional on a sensor reading)."""
    rng = random.Random(seed)
    out: list[Row] = []
    for index in range(singles):
        scenario_id = f"home-s-{index:04d}"
        if rng.random() < 0.06:
            request, message = rng.choice(_OFF_TOPIC)
            thought = "This is not something the home can do, so I tell the user."
            step = ("respond", {"message": message}, request, thought, "tell the user", "")
            out += _scenario_rows(scenario_id, request, [step])
            continue
        step = rng.choice(SINGLE_STEPS)(rng)
        out += _scenario_rows(scenario_id, _sentence(step[2]), [step])
    for index in range(multis):
        scenario_id = f"home-m-{index:04d}"
        draw = rng.random()
        if draw < 0.25:
            steps = _reading_then_thermostat(rng)
            request = _sentence(steps[0][2] + ", " + steps[1][2])
            out += _scenario_rows(scenario_id, request, steps)
            continue
        if draw < 0.5:
            request, steps, condition = _conditional(rng)
            out += _scenario_rows(scenario_id, request, steps, condition)
            continue
        count = 2 if draw < 0.85 else 3
        makers = rng.sample(SINGLE_STEPS[:-1], count)
        steps = [maker(rng) for maker in makers]
        steps = [steps[0], *(_later(s, d, rng) for d, s in pairwise(steps))]
        request = steps[0][2]
        for step in steps[1:]:
            request += rng.choice(_JOINERS) + step[2]
        out += _scenario_rows(scenario_id, _sentence(request), steps)
    return out


def write_rows(path: Path, seed: int = 0) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows(seed)))
    return path


# --- the planted mistakes of this domain (`bench.planting`) -----------------------------------

_REPLY = (
    "The reading does not meet the condition, so now I tell the user.",
    "The room is warm enough, so I left the heating alone.",
    "tell the user why not",
)
_PAIRS = {
    "lights_on": "lights_off",
    "lights_off": "lights_on",
    "lock_door": "unlock_door",
    "unlock_door": "lock_door",
}
# A coherent answer for the tool a misread request suggests: lock ↔ unlock, lights on ↔ off.
_REWRITTEN = {
    "lock_door": ("unlock_door", "door", "Then I unlock the {} door.", "unlock the {} door"),
    "unlock_door": ("lock_door", "door", "Then I lock the {} door.", "lock the {} door"),
    "lights_on": ("lights_off", "room", "Then I switch the lights off.", "lights off"),
    "lights_off": ("lights_on", "room", "Then I switch the lights on.", "lights on"),
}


def rewrite_for_another_tool(scenario: list[Row], rng: random.Random) -> list[Row] | None:
    """The last step answered, coherently, for the opposite device action (lock for unlock,
    lights off for on): thought, action and plan agree with each other."""
    last = scenario[-1]
    if last["tool"] not in _REWRITTEN:
        return None
    tool, slot, thought, step = _REWRITTEN[last["tool"]]
    value = planting.solution_of(last)["action"]["params"][slot]
    action = {"tool": tool, "params": {slot: value}}
    answer = {"thought": thought.format(value), "action": action, "plan": [step.format(value)]}
    return [planting.relabelled(last, tool, answer, None)]


def kinds(home: Catalogue) -> dict[str, planting.Kind]:
    """The shipped domain's kinds of annotator mistake, in this domain's words, and wrong
    params."""
    return {
        "misread figures": planting.reply_instead({"en": _REPLY}),
        "copied row above": planting.copy_row_above,
        "tool changed, reasoning kept": planting.relabel_pair(_PAIRS, home),
        "goal labelled first": planting.label_the_goal_first,
        "adjacent steps swapped": planting.swap_adjacent_steps,
        "answer rewritten for another tool": rewrite_for_another_tool,
        planting.WRONG_PARAMS: planting.wrong_params(home),
    }
