// Package subtask is a subtask's behaviour as pure state machines: the
// barrier handler (Handler: aligned, at-least-once, unaligned, aligned with
// a timeout) and, around it, the Machine of one subtask. Neither does IO,
// reads a clock or runs a goroutine: time is an int64 in ms passed in.
package subtask
