package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/internal/poll"
)

// NATSServer is one nats-server process with JetStream, alone or a node of
// a cluster. Its ports and store directory stay the same across restarts,
// so clients reconnect to it and it recovers its streams.
type NATSServer struct {
	Name        string
	Port        int // client port on 127.0.0.1
	HTTPPort    int // monitoring port (healthz)
	ClusterPort int // route port; 0 for a single node
	StoreDir    string
	Proc        *Process
}

// healthClient asks a server's monitoring port; its timeout keeps a paused
// server from hanging a poll.
var healthClient = &http.Client{Timeout: 5 * time.Second}

// pollInterval paces the polls of WaitHealthy.
const pollInterval = 50 * time.Millisecond

// URL is the server's client URL.
func (n *NATSServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// NewNATSServers prepares count servers under dir (one, or a cluster of
// count nodes with routes to each other); Start starts them.
func NewNATSServers(bin, dir string, count int) ([]*NATSServer, error) {
	servers := make([]*NATSServer, count)
	for i := range servers {
		n := &NATSServer{Name: fmt.Sprintf("n%d", i+1)}
		ports := []*int{&n.Port, &n.HTTPPort}
		if count > 1 {
			ports = append(ports, &n.ClusterPort)
		}
		for _, p := range ports {
			port, err := FreePort()
			if err != nil {
				return nil, err
			}
			*p = port
		}
		n.StoreDir = filepath.Join(dir, n.Name, "store")
		if err := os.MkdirAll(n.StoreDir, 0o755); err != nil {
			return nil, fmt.Errorf("create store of %s: %w", n.Name, err)
		}
		servers[i] = n
	}
	var routes []string
	for _, n := range servers {
		if n.ClusterPort != 0 {
			routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(n.ClusterPort))
		}
	}
	for _, n := range servers {
		args := []string{"-js", "-sd", n.StoreDir, "-a", "127.0.0.1", "-p", strconv.Itoa(n.Port),
			"-m", strconv.Itoa(n.HTTPPort), "-n", n.Name}
		if n.ClusterPort != 0 {
			args = append(args, "--cluster_name", "scenario",
				"--cluster", "nats://127.0.0.1:"+strconv.Itoa(n.ClusterPort),
				"--routes", strings.Join(routes, ","))
		}
		n.Proc = &Process{Name: "nats-" + n.Name, Path: bin, Args: args, LogPath: filepath.Join(dir, n.Name, "nats.log")}
	}
	return servers, nil
}

// Start starts the server (again) on its ports and store.
func (n *NATSServer) Start() error { return n.Proc.Start() }

// WaitHealthy waits until the server's /healthz says JetStream is up: on a
// cluster node, that it has joined the meta group and its streams are
// current.
func (n *NATSServer) WaitHealthy(ctx context.Context) error {
	url := "http://127.0.0.1:" + strconv.Itoa(n.HTTPPort) + "/healthz"
	err := poll.Until(ctx, pollInterval, func() error {
		select {
		case <-n.Proc.Exited():
			return poll.Permanent(fmt.Errorf("nats-server %s exited while starting (see %s): %v", n.Name, n.Proc.LogPath, n.Proc.ExitErr()))
		default:
		}
		return n.healthy(ctx, url)
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("nats-server %s not healthy: %w", n.Name, err)
	}
	return err
}

// healthy checks /healthz and, on a cluster node, that the JetStream meta
// group has a leader and, on the leader, that every peer is current
// (/jsz): a fresh cluster answers healthz before its peers have caught up,
// and creating replicated streams then stalls.
func (n *NATSServer) healthy(ctx context.Context, healthz string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
	resp, err := healthClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	if n.ClusterPort == 0 {
		return nil
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(n.HTTPPort)+"/jsz", nil)
	resp, err = healthClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta *struct {
			Leader   string `json:"leader"`
			Size     int    `json:"cluster_size"`
			Replicas []struct {
				Name    string `json:"name"`
				Current bool   `json:"current"`
				Offline bool   `json:"offline"`
			} `json:"replicas"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return fmt.Errorf("jsz: %w", err)
	}
	m := jsz.Meta
	if m == nil || m.Leader == "" {
		return errors.New("no JetStream meta leader yet")
	}
	if m.Leader != n.Name {
		return nil // only the leader knows whether its peers are current
	}
	if len(m.Replicas) < m.Size-1 {
		return fmt.Errorf("meta leader knows %d of %d peers", len(m.Replicas)+1, m.Size)
	}
	for _, r := range m.Replicas {
		if !r.Current || r.Offline {
			return fmt.Errorf("meta peer %s not current", r.Name)
		}
	}
	return nil
}
