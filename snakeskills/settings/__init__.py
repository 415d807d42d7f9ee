"""The config as typed, frozen sections, built once by the plan after the schema fills the defaults, and read back
by each job from its settings file: a key is parsed in one place and checked in one place (docs/development.md,
"Adding a config key")."""
