// Package tenant keeps the identities of a multi-tenant wstream cluster: a
// NATS operator, its system account, the service account that the
// coordinator and workers use, and one NATS account per tenant, each with
// its quotas.
//
// A tenant is a NATS account, so NATS itself keeps tenants apart: a
// tenant's users can reach the streams, key-value buckets and object stores
// of their own account only. The control plane crosses accounts in exactly
// two places, both declared in the JWTs this package signs:
//
//   - the service account exports the service "wstream.api.ACCOUNT.>"
//     with the importer's account public key at token 3, and every tenant
//     account imports it as "wstream.coord.>": a tenant's request to
//     "wstream.coord.submit" reaches the coordinator as
//     "wstream.api.<tenant account>.submit", so the subject itself says,
//     with the server's authority, who asks;
//   - the service account exports the stream "wstream.events.ACCOUNT.>"
//     the same way, imported as "wstream.>": the coordinator announces the
//     end of a tenant's job there, and only that tenant hears it.
//
// The service account's users have separate identities: the admin and the
// coordinator, whose reach is the account's, and one user per worker
// (WorkerUser), whose permissions allow only that worker's own subjects.
// The coordinator reaches a tenant's data as a user of the tenant's
// account; a worker reaches a job's data (its module, data stream,
// checkpoints in object stores, JetStream connectors) through the
// credentials of the job attempt it runs (AttemptUser): a user of the
// job's account that may not use the control plane, expires, and is
// revoked when the attempt ends. The authority holds every account's key,
// so no tenant credential ever gives access to another account, and no
// tenant can raise its own limits (the account JWT, which carries its
// JetStream limits, is signed by the operator).
//
// The authority lives in a directory (mode 0700, files 0600). With the
// embedded NATS server the directory's account resolver serves the JWTs;
// against an external server, ServerConfig writes the nats-server
// configuration that trusts the operator, and account updates are pushed
// through the system account ($SYS.REQ.CLAIMS.UPDATE), which works the same
// for both.
package tenant
