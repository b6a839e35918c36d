package transport

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream API's refusals of a replica count (nats-server's
// JSStreamReplicasNotSupportedErr, JSInsufficientResourcesErr,
// JSClusterNoPeersErr).
const (
	jsReplicasNotSupported  jetstream.ErrorCode = 10074
	jsInsufficientResources jetstream.ErrorCode = 10023
	jsClusterNoPeers        jetstream.ErrorCode = 10005
)

// ReplicasError says what to change when err is JetStream refusing to keep
// replicas copies of a stream (the server's --replicas); other errors are
// returned as they are.
func ReplicasError(err error, replicas int) error {
	var api *jetstream.APIError
	if err == nil || replicas <= 1 || !errors.As(err, &api) {
		return err
	}
	switch api.ErrorCode {
	case jsReplicasNotSupported:
		return fmt.Errorf("--replicas %d: the NATS server is not clustered (1 node): %w", replicas, err)
	case jsInsufficientResources, jsClusterNoPeers:
		return fmt.Errorf("--replicas %d: the NATS cluster cannot place %d copies (fewer JetStream servers up, or too little storage on them): %w", replicas, replicas, err)
	}
	return err
}

// CheckReplicas refuses a replica count above one on a NATS server that
// is not part of a cluster, before anything is created.
func CheckReplicas(nc *nats.Conn, replicas int) error {
	if replicas < 1 {
		return fmt.Errorf("--replicas %d: must be at least 1", replicas)
	}
	if replicas > 5 {
		return fmt.Errorf("--replicas %d: JetStream keeps at most 5 copies", replicas)
	}
	if replicas > 1 && nc.ConnectedClusterName() == "" {
		return fmt.Errorf("--replicas %d: the NATS server at %s is not clustered (1 node); run a cluster of at least %d JetStream servers, or --replicas 1",
			replicas, nc.ConnectedUrlRedacted(), replicas)
	}
	return nil
}
