"""A setting declared once: its default, help text, flag kind and whether a
resumed run may change it, as the metadata of a dataclass field.

`config.TrainConfig` and the smaller groups it carries (each owned by the
module it configures: `participation.TimerSettings`, and a mechanism's,
`mechanisms.adaptive.AdaptiveSettings`, `mechanisms.blt.BLTSettings`,
`mechanisms.base.SecAggSettings`) declare their fields with `setting`; a
dataclass that carries a setting declared elsewhere takes it with
`same_setting`, so a default or a help text is written once, and every
binary's flags are generated from these declarations (`config.define_flags`).
"""

import dataclasses


def setting(default, help_text: str, *, resumable: bool = False,
            flag_type=None):
  """A dataclass field with its help text (and whether resume may change it,
  and 'enum' for a flag with a fixed set of values)."""
  return dataclasses.field(
      default=default, metadata=dict(help=help_text, resumable=resumable,
                                     flag_type=flag_type))


def same_setting(owner, name: str):
  """The field `name` of the dataclass `owner`, carried by another dataclass
  with the same default, help text and flag kind."""
  fields = {field.name: field for field in dataclasses.fields(owner)}
  return dataclasses.field(default=fields[name].default,
                           metadata=fields[name].metadata)


def values_of(owner, source):
  """`owner` built from the same-named attributes of `source`."""
  return owner(**{field.name: getattr(source, field.name)
                  for field in dataclasses.fields(owner)})


def changed(instance):
  """'--name=value' for each field of the settings dataclass `instance` that
  differs from its declared default, in declaration order."""
  return [f'--{field.name}={getattr(instance, field.name)}'
          for field in dataclasses.fields(instance)
          if getattr(instance, field.name) != field.default]
