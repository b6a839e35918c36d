// Package conformance holds the conformance suite of the guest languages:
// every language's module examples/wasm/LANG/conformance implements the
// operator of SPEC.md with that language's SDK, and TestConformance runs the
// same checks against each through the real host and real keyed state. The
// README's table (language × capability) is checked against the suite by
// TestREADMETable.
package conformance
