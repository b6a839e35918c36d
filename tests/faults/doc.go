// Package faults is the fault-injection suite: a three-node NATS cluster,
// two coordinators and three workers as separate processes, each client
// behind a TCP fault proxy, a keyed exactly-once job (the short schedule's
// as a tenant, with the cluster's accounts on), and a nemesis driven by a
// seed. Its tests check the job's output against an oracle computed
// from the input the test wrote. See docs/cluster.md, "Fault suite".
package faults
