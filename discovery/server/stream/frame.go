package stream

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// Field numbers of the ServerMessage a frame spells out.
var (
	snapshotField = (&discoveryv1.ServerMessage{}).ProtoReflect().Descriptor().Fields().ByName("snapshot").Number()
	nonceField    = (&discoveryv1.Snapshot{}).ProtoReflect().Descriptor().Fields().ByName("nonce").Number()
)

// frame is one ServerMessage carrying a snapshot: the Snapshot body that cache.Snapshot.Encode
// shares between every stream sending it, and this stream's nonce appended as the last field.
// The codec passes its bytes through, so a send copies the body into the connection only.
type frame struct {
	// head is the ServerMessage's snapshot field tag and length, tail the nonce field; both
	// live in one small buffer of their own.
	head, body, tail []byte
}

func newFrame(body []byte, nonce string) *frame {
	var n []byte
	n = protowire.AppendTag(n, nonceField, protowire.BytesType)
	n = protowire.AppendString(n, nonce)
	buf := make([]byte, 0, protowire.SizeTag(snapshotField)+protowire.SizeVarint(uint64(len(body)+len(n)))+len(n))
	buf = protowire.AppendTag(buf, snapshotField, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(len(body)+len(n)))
	head := len(buf)
	buf = append(buf, n...)
	return &frame{head: buf[:head], body: body, tail: buf[head:]}
}

// Len returns the size of the encoded ServerMessage.
func (f *frame) Len() int { return len(f.head) + len(f.body) + len(f.tail) }

// codec is the proto codec, except that a frame is passed through as it is. The stream
// listener's server forces it for every message (see NewGRPCServer).
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{CodecV2: encoding.GetCodecV2(grpcproto.Name)} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		// SliceBuffers are never pooled: gRPC's Free after the write leaves the shared body alone.
		return mem.BufferSlice{mem.SliceBuffer(f.head), mem.SliceBuffer(f.body), mem.SliceBuffer(f.tail)}, nil
	}
	return c.CodecV2.Marshal(v)
}
