"""Program options are declared once (`learners.configuration.config.option`): the
dataclass field is the absl flag, with its type, default and help, and the parsed flags
fill it back."""
import dataclasses
from typing import List, Optional

import pytest
from absl import flags

from learners.configuration import config


@dataclasses.dataclass(frozen=True)
class Sample:
  count: int = config.option(3, 'How many.')
  rate: float = config.option(0.5, 'How fast.')
  name: Optional[str] = config.option(None, 'A name.')
  mode: str = config.option('a', 'Which mode.', choices=('a', 'b'))
  verbose: bool = config.option(False, 'Say more.')
  tags: List[str] = config.option([], 'Repeatable.')
  overwrite: bool = config.shared_option('overwrite')


def test_each_field_is_its_flag_and_parsed_flags_fill_it_back():
  flag_values = flags.FlagValues()
  config.define_flags(Sample, flag_values)
  assert 'overwrite' not in flag_values  # a common flag, defined once for every program
  flag_values(['prog', '--count=7', '--rate=2.5', '--name=x', '--mode=b', '--verbose',
               '--tags=p', '--tags=q'])
  overwrite = flags.FlagValues()
  config.define_flags(config.CommonOptions, overwrite)
  overwrite(['prog', '--overwrite'])
  flag_values.append_flag_values(overwrite)

  assert config.options_from_flags(Sample, flag_values) == Sample(
      count=7, rate=2.5, name='x', mode='b', verbose=True, tags=['p', 'q'], overwrite=True)
  assert flag_values['count'].help == 'How many.' and flag_values['count'].default == 3
  with pytest.raises(flags.IllegalFlagValueError):
    flag_values['mode'].parse('c')


def test_an_option_without_a_flag_type_is_refused():
  @dataclasses.dataclass
  class Bad:
    pairs: tuple = config.option((), 'No flag type.')
  with pytest.raises(TypeError, match='Option pairs: no flag type'):
    config.define_flags(Bad, flags.FlagValues())

