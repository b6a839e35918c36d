// Package objwhole tells whether a JetStream object store holds every
// chunk an object's info names.
//
// nats.go's object store sends a put's chunks and its info without
// waiting for each acknowledgement: when the server refuses a chunk after
// it stored the info, the client purges the chunks and returns the error,
// but the info stays, with the right size and digest, naming chunks that
// are gone. Only the stream can tell: reading such an object waits for
// chunks that never come.
package objwhole

import (
	"context"
	"encoding/base64"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the name of the stream that holds bucket's objects.
func StreamName(bucket string) string { return "OBJ_" + bucket }

// MetaSubject is the subject of the info of the object name in bucket:
// one message, rolled up by each put and delete.
func MetaSubject(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// ChunkSubject is the subject of the chunks of the object put as nuid in
// bucket.
func ChunkSubject(bucket, nuid string) string { return "$O." + bucket + ".C." + nuid }

// Whole says whether st, the stream of the object's bucket, holds every
// chunk that oi, the object's info, names. A deleted or empty object is
// whole.
func Whole(ctx context.Context, st jetstream.Stream, oi *jetstream.ObjectInfo) (bool, error) {
	if oi.Deleted || oi.Chunks == 0 {
		return true, nil
	}
	subj := ChunkSubject(oi.Bucket, oi.NUID)
	si, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return false, err
	}
	return si.State.Subjects[subj] >= uint64(oi.Chunks), nil
}
