"""A plugin as a user would write one: importing it registers the toy position scheme ``clock`` and the toy objective
``half_clm`` of tests/test_toy_position_scheme.py and tests/test_toy_objective.py, and the encoder-decoder pieces of
``encdec``: the family ``toy_t5``, its architecture's objective ``lead_lm`` (with its own setting ``objective.split``
and its scoring and generation rules) and the norm ``scalenorm`` (``famlab <command> --plugin
tests.plugins.toy_plugin``;
docs/architecture.md, Plugins)."""

from famlab.families.blocks.norms import NORMS
from famlab.families.blocks.positions import register_positions
from famlab.families.formats import Arch
from famlab.families.registry import register_family
from famlab.objectives.registry import register_objective

from tests.plugins.toy_plugin.encdec import NORM, lead_entry, scalenorm, toy_t5_spec
from tests.plugins.toy_plugin.encdec import OBJECTIVE as ENCDEC_OBJECTIVE
from tests.test_toy_objective import NAME as OBJECTIVE
from tests.test_toy_objective import half_entry
from tests.test_toy_position_scheme import NAME as POSITIONS
from tests.test_toy_position_scheme import ClockPositions, clock

__version__ = "0.1"

ClockPositions.scheme = register_positions(POSITIONS, clock, length_bounded=False)
register_objective(Arch.DECODER, OBJECTIVE, half_entry())
register_objective(Arch.ENCODER_DECODER, ENCDEC_OBJECTIVE, lead_entry())
NORMS.register(NORM, scalenorm)
register_family(toy_t5_spec())
