// Package project creates and builds wstream operator projects: what
// `wstream init` and `wstream build` do.
//
// A project is a directory with a project file (wstream.json: its name,
// guest language, plan file and output module), a job plan (plan.json), the
// operators' sources and a copy of the guest SDK of its language under sdk/,
// taken from the SDK sources embedded in the wstream binary (package
// github.com/wstream/wstream), so that a project builds offline and outside
// the wstream repository. Init writes one from the templates embedded here:
// a word count (operators "split" and "count", keyed state and an
// event-time timer) with its plan.
//
// Build checks the plan (job.Parse and Validate), runs the language's
// compiler with the flags the SDK needs, and stores the plan in the module
// as its "wstream.plan" custom section (abi/ABI.md), so that `wstream
// deploy MODULE` needs nothing else. A compiler that is not installed is a
// *MissingToolError naming it and saying how to install it.
package project
