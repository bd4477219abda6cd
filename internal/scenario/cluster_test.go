package scenario

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/handoffhq/handoff/changelog"
)

// TestClusterNodeLossDuringScaleUp runs the group on a three-node NATS
// cluster with every stream and bucket at three replicas, and kills (-9)
// the node leading the changelog stream while a fourth member is being
// scaled in. The group finishes the scale-up on two nodes; the node then
// comes back and catches up, and every task commits again (a worker's
// input consumer may wait for the node: see logCommitGaps). Nothing
// acknowledged is lost. It runs only
// with HANDOFF_CLUSTER_TESTS=1.
func TestClusterNodeLossDuringScaleUp(t *testing.T) {
	skipShort(t)
	if os.Getenv("HANDOFF_CLUSTER_TESTS") != "1" {
		t.Skip("three-node NATS cluster scenario; set HANDOFF_CLUSTER_TESTS=1 to run it")
	}
	o := DefaultOptions()
	o.NATSNodes, o.Replicas = 3, 3
	o.MaxLearnersPerMember = 1
	h := New(t, o)
	h.Start(3)
	h.WaitCommitting(60*time.Second, 20)
	mark := h.Mark()

	victim := h.streamLeader(changelog.StreamName(o.Group))
	tr := h.OnMoving("a hand-off to m4 in flight", func(string) {
		if err := victim.Proc.Kill(); err != nil {
			t.Errorf("kill NATS node %s: %v", victim.Name, err)
		}
	})
	m4 := h.AddAgent("m4")
	inFlight := tr.Wait(h, 60*time.Second)
	h.Logf("killed NATS node %s (changelog leader) with %s", victim.Name, inFlight)
	// The newcomer's worker starts once the cluster answers again: the
	// example worker exits if it cannot reach JetStream when it starts.
	h.WaitJetStream(60 * time.Second)
	h.StartWorker(m4)
	h.WaitSettled(120*time.Second, "m1", "m2", "m3", "m4")

	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := victim.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	h.Logf("NATS node %s back and current", victim.Name)
	h.WaitCommitting(60*time.Second, 3)
	h.Verify(Expect{Mark: mark})
}

// streamLeader returns the NATS node that leads stream.
func (h *Harness) streamLeader(stream string) *NATSServer {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, stream)
	if err != nil {
		h.t.Fatalf("look up stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		h.t.Fatalf("stream %s info: %v", stream, err)
	}
	if info.Cluster == nil {
		h.t.Fatalf("stream %s has no cluster info", stream)
	}
	for _, n := range h.NATS {
		if n.Name == info.Cluster.Leader {
			return n
		}
	}
	h.t.Fatalf("stream %s is led by %q, not one of this cluster's nodes", stream, info.Cluster.Leader)
	return nil
}
