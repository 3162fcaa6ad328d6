// Package pipeline runs profsym's three services as child processes on loopback and reads
// what they wrote: the building blocks of the demo (`go run ./demo`) and of the end-to-end
// test (`e2e/`). Children get their own process groups, so a Ctrl-C in the terminal reaches
// only the parent, which then stops them in pipeline order and leaves no orphans.
package pipeline
