// Package api serves a coordinator over HTTP: one listener per process
// that serves the web UI at /, the versioned JSON REST API under /v1/
// (docs/rest.md) and, when a handler is given, Prometheus metrics at
// /metrics. It is modelled on Flink's monitoring API: cluster overview and
// workers; jobs and their vertices with live per-subtask figures;
// checkpoint overview, history, summary and details; exceptions; and
// savepoint, stop and cancel, which go through the same coordinator paths
// as the NATS control plane (and to the same audit log).
//
// Who may do what:
//
//  1. Without tenants (Config.Auth nil) every request acts as the cluster's
//     admin; the listener should then bind to a loopback address, which is
//     the default of `wstream server` and `wstream deploy`.
//  2. With tenants every /v1/ and /metrics request carries a bearer token
//     (Authorization: Bearer NAME.SECRET). Config.Auth maps it to a tenant
//     or the admin; anything else is refused with 401 and audited. A tenant
//     sees and acts on its own jobs only: another tenant's job answers 404,
//     as if it did not exist, and the workers (shared by all) answer 403.
//  3. Requests that change something are POSTs with a JSON content type
//     (a module upload, multipart, carries the header Wstream-Deploy,
//     which a form cannot send), and a request that carries an Origin
//     header must come from the page this server served: a web page
//     elsewhere cannot make a browser act on a cluster it can reach.
//  4. A listener on loopback answers only a Host header that names it
//     (its address, localhost, 127.0.0.1 or [::1], with its port), else
//     421: a page of a site whose name was made to resolve to 127.0.0.1
//     would otherwise be of the listener's own origin.
//  5. Every refusal is audited once with the error it was answered with;
//     a job the caller may not see is "no job ID" whoever owns it.
//
// Jobs, workers, checkpoints and exceptions are answered as the view
// types of view.go, which `wstream ... -o json` prints too: one model,
// in milliseconds, bytes and string enums. Deploying a module (POST
// /v1/jobs) and rescaling (POST /v1/jobs/{id}/rescale, through the
// upgrade path at a savepoint) use what Config.Deploy and Config.Upgrade
// provide.
//
// The UI is plain HTML, JavaScript and CSS embedded in the binary (no
// build step): it polls the API, patches the page in place (a selection
// survives a refresh), and draws a job's graph and plots as SVG.
package api
