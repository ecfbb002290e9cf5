// Package config reads poppyhost's settings from POPPYHOST_* environment
// variables and command-line flags (a flag wins over its variable),
// validates them once at start, and describes them for the log with
// secrets masked.
package config
