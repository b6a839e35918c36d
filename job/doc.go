// Package job holds a job's plan, its validation, the overrides that flags
// apply to it, and the physical graph the runtime deploys.
//
// A plan is the logical job: vertices (sources, operators, sinks) with
// user-assigned, stable ids, and the edges between them with a partitioning
// (forward, key, rebalance, broadcast). It arrives as JSON from a module, a
// plan file or a stored job, and is used in four steps:
//
//  1. Parse decodes it strictly (an unknown field is an error) and applies
//     the defaults (Normalize). It refuses a plan over the size, nesting,
//     vertex, edge and config-size limits before decoding what they bound.
//  2. Apply changes it by command-line overrides: parallelism, per-vertex
//     parallelism, max parallelism, and source and sink connectors.
//  3. Validate checks it and reports the first problem, naming the field
//     path and the value, in a deterministic order.
//  4. Build turns it into a Graph: vertices joined by chainable forward edges
//     become chains (one subtask runs a whole chain), the other edges become
//     channels between chains.
//
// Plans may come from hostile modules, so every size a plan can ask for is
// bounded by Limits: Parse, Validate and Build apply the defaults
// (DefaultLimits), and the Limits methods of the same names others, such
// as a tenant's quota. A limit error is an *Error whose Limit names the
// limit.
//
// Defaults, applied by Normalize (which Parse, Apply, Validate and Build all
// call, so callers rarely need to): maxParallelism abi.DefaultMaxParallelism,
// parallelism 1, a vertex's parallelism the plan's, outputs ["main"] for
// sources and operators, an edge's output the from-vertex's first output,
// partition "forward". A vertex that did not set its parallelism keeps
// following the plan's, so a parallelism override or a rescale moves it and
// leaves vertices with their own parallelism alone; JSON preserves that
// distinction.
package job
