package stream

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that a frame, shared body plus nonce, decodes as the ServerMessage the proto codec
// would have sent, for bodies and nonces whose lengths need one to three varint bytes.
func TestFrameDecodesAsTheMessageWithItsNonce(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 100, 200, 20000} {
		for _, nonce := range []string{"1", "18446744073709551615", strings.Repeat("n", 130)} {
			t.Run(strconv.Itoa(size)+"/"+strconv.Itoa(len(nonce)), func(t *testing.T) {
				t.Parallel()
				var rs []*discoveryv1.Resource
				if size > 0 {
					r, err := cache.NewResource("listener", wrapperspb.String(strings.Repeat("x", size)))
					if err != nil {
						t.Fatal(err)
					}
					rs = append(rs, r)
				}
				snap, err := cache.NewSnapshot(rs, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				body, _, err := snap.Encode(nil)
				if err != nil {
					t.Fatal(err)
				}
				f := newFrame(body, nonce)
				wire, err := newCodec().Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				if wire.Len() != f.Len() {
					t.Errorf("codec gave %d bytes, frame has %d", wire.Len(), f.Len())
				}
				got := &discoveryv1.ServerMessage{}
				if err := proto.Unmarshal(wire.Materialize(), got); err != nil {
					t.Fatal(err)
				}
				want := &discoveryv1.ServerMessage{Kind: &discoveryv1.ServerMessage_Snapshot{Snapshot: &discoveryv1.Snapshot{
					Version: snap.Version(), Nonce: nonce, Full: true, Resources: snap.Resources(),
				}}}
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Fatalf("decoded frame (-want +got):\n%s", diff)
				}
				if &wire[1].ReadOnlyData()[0] != &body[0] {
					t.Error("the codec copied the shared body")
				}
			})
		}
	}
}

// Tests that the codec marshals every other message as the proto codec does.
func TestCodecMarshalsOtherMessagesAsProto(t *testing.T) {
	t.Parallel()
	msg := &discoveryv1.ServerMessage{Kind: &discoveryv1.ServerMessage_Snapshot{Snapshot: &discoveryv1.Snapshot{Version: "v", Nonce: "1"}}}
	wire, err := newCodec().Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, wire.Materialize()); diff != "" {
		t.Fatalf("bytes (-want +got):\n%s", diff)
	}
}
