// Package fairshare shares a worker's cores between tenants: a weighted
// fair gate that every guest call (a call into a wasm sandbox) passes
// before it runs.
//
// # Why a gate on calls
//
// A guest call cannot be preempted: wazero stops a call only at its
// deadline (10 s by default). Whatever a tenant's calls do inside (loop,
// emit a flood of output, write state, register timers) they do on a core
// the host cannot take back until the call returns. Scheduling after the
// fact (charging a tenant once it has used too much) therefore comes too
// late; the only lever is admission: a tenant must never hold more than
// its share of concurrently running calls in the first place. The gate has
// Slots slots, by default one per core (runtime.GOMAXPROCS), and a call
// runs only while it holds one.
//
// # Policy
//
// A tenant is active while it has registered users (Join, typically one
// per operator instance of its subtasks, until Leave) or calls running or
// waiting. With one active tenant, it may hold every slot: a worker that
// serves one tenant loses nothing. With more:
//
//   - Each active tenant t has a weighted share slots·w_t/Σw of the slots.
//     It is guaranteed its share rounded down, and at least one slot, so
//     that, while there are no more active tenants than slots, every
//     tenant can always run a call; it may hold at most its share rounded
//     up. Slots that the guarantees leave over (when shares are
//     fractional) are spare: a tenant may take one only while it is below
//     its rounded-up share.
//   - The cap holds whether or not the other tenants are calling at the
//     moment. Lending an idle tenant's slot to another would let the
//     borrower keep it for a whole call, up to the deadline, once the
//     owner wants it back: without preemption, a loan cannot be recalled.
//   - When a slot frees and several tenants may take it, it goes to the one
//     with the least virtual time: the time its calls have held slots,
//     each divided by its weight, counting the calls still running up to
//     now. A tenant looping inside long calls or flooding with short ones
//     moves back in that order as fast as it uses the cores.
//     Within a tenant, calls are granted in arrival order.
//   - A tenant that returns from idle starts level with the busy tenant
//     furthest behind: unused time is not saved up to be spent in a burst.
//     Its virtual time survives Leave and Join, so a tenant that restarts
//     its jobs in a loop starts no fresher than it left.
//
// So, on two cores, two active tenants of any weights get one slot each,
// and a hostile tenant's calls, however long, occupy one core at most;
// with three tenants on two cores, slots go around in virtual-time order,
// which over time gives each busy tenant call time in proportion to its
// weight (in steps of one call, since a call is never cut short). Weights
// shape the division of slots only where there are enough of them: on
// two cores a tenant of weight 3 beside one of weight 1 still gets one
// slot, because the lighter tenant is guaranteed one and a slot taken by
// a call cannot be taken back.
//
// A tenant that joins while another, alone until then, holds every slot
// waits for the first of those calls to return (at most the call
// deadline); from then on the division holds.
//
// # What the gate covers
//
// The gate admits and charges whatever holds a slot; it cannot tell a guest
// call from host work. The worker holds its tenant's slot for a subtask's
// guest calls and for the host work they cause around them (routing and
// copying a flood of output, handing it to a sink, flushing written state
// to Pebble, firing timers), and gives it back whenever the subtask waits
// (for input, for room in a full channel, for a control message), so that
// no slot is held by a subtask waiting on another. What remains outside
// every slot competes for the cores through the Go scheduler alone and
// needs bounds of its own: a source producing its input, sending into a
// channel, the garbage collector's work on the garbage a tenant makes, and
// deploying a job's subtasks again after a failure (opening state, setting
// up channels; instantiation holds a slot), which restart back-off bounds.
// Pebble's compactions of a tenant's state take a slot of the tenant as a
// call does (package state, Options.Admit).
//
// Since a guest call holds its P between its calls into Go, a worker that
// runs tenants' jobs asks for one P more than the gate has slots
// (Gate.KeepHostP), so that the work outside the slots is never left
// waiting for a P that spinning guest calls keep.
//
// # The disk
//
// What a tenant's state writes cost the disk (the kernel's writeback of
// Pebble's files, compactions rewriting them) is no slot's work. Rate is a
// token bucket for it: the worker charges a tenant's Rate with the bytes
// its subtasks' stores committed, and a subtask whose tenant is over the
// rate waits, holding no slot, before its next input.
//
// # Shape
//
// The decisions live in a pure state machine (core) that takes the time
// as an argument and does no I/O; Gate adds the lock, the clock and the
// blocking. Stats reports, per tenant, calls, waits, busy and waiting time,
// for metrics.
package fairshare
