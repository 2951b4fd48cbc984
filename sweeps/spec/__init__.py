"""The sweep file: schema (:mod:`.schema`), grid expansion (:mod:`.grid`), cell validation
(:mod:`.validate`), loading (:mod:`.load`) and the launch record ``--resume`` reads
(:mod:`.launch_record`).

A sweep file is one study. ``load_spec(path)`` parses and validates it completely -- every key,
every grid cell's resolved model and data settings, every nuisance distribution -- before Ray is
started, and raises :class:`SpecError` naming the key's path and what is allowed. The grid is the
*scientific* comparison; ``parameters`` (W&B Sweeps' shape) are *nuisance* parameters that Optuna
tunes inside each cell with a budget of ``num_samples`` trials.
"""

from sweeps.layout import LAUNCH_FILE
from sweeps.spec.dotted import get_dotted, set_dotted
from sweeps.spec.grid import (
    COLUMN_NAMES,
    SECTIONS,
    Cell,
    Sweep,
    TrialPlan,
    base_sections,
    column_name,
    expand_grid,
    flat_columns,
    resolve_sections,
    unit_key,
)
from sweeps.spec.launch_record import check_resumed_plan, resume_launch, save_launch
from sweeps.spec.load import (
    SMOKE_DEFAULTS,
    build_sweep,
    load_spec,
    parse_overrides,
    profile_line,
)
from sweeps.spec.schema import SpecError, SweepSpec, TrainerSpec
from sweeps.spec.search_schema import ParamSpec
from sweeps.spec.validate import DERIVED_MODEL_KEYS, TASKS

__all__ = [
    "COLUMN_NAMES",
    "DERIVED_MODEL_KEYS",
    "LAUNCH_FILE",
    "SECTIONS",
    "SMOKE_DEFAULTS",
    "TASKS",
    "Cell",
    "ParamSpec",
    "SpecError",
    "Sweep",
    "SweepSpec",
    "TrainerSpec",
    "TrialPlan",
    "base_sections",
    "build_sweep",
    "check_resumed_plan",
    "column_name",
    "expand_grid",
    "flat_columns",
    "get_dotted",
    "load_spec",
    "profile_line",
    "parse_overrides",
    "resolve_sections",
    "resume_launch",
    "save_launch",
    "set_dotted",
    "unit_key",
]
