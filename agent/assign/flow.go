package assign

import "math"

// flowGraph is a small min-cost flow network (tens of nodes) for
// spreadSpares. Costs may be negative; the graph it is built as has no
// cycles, so successive shortest paths (Bellman-Ford) stay correct.
type flowGraph struct {
	adj   [][]int
	to    []int
	cap   []int
	cost  []int
	limit []int // the capacity an edge was created with
}

func newFlowGraph(nodes int) *flowGraph { return &flowGraph{adj: make([][]int, nodes)} }

// edge adds an edge and its residual twin; it returns the edge's index.
func (g *flowGraph) edge(from, to, capacity, cost int) int {
	e := len(g.to)
	g.to = append(g.to, to, from)
	g.cap = append(g.cap, capacity, 0)
	g.cost = append(g.cost, cost, -cost)
	g.limit = append(g.limit, capacity, 0)
	g.adj[from] = append(g.adj[from], e)
	g.adj[to] = append(g.adj[to], e+1)
	return e
}

// flow is what went through edge e.
func (g *flowGraph) flow(e int) int { return g.limit[e] - g.cap[e] }

// minCostFlow pushes as much as possible from src to sink, cheapest paths
// first.
func (g *flowGraph) minCostFlow(src, sink int) {
	n := len(g.adj)
	dist := make([]int, n)
	via := make([]int, n)
	for {
		for i := range dist {
			dist[i], via[i] = math.MaxInt, -1
		}
		dist[src] = 0
		for changed, round := true, 0; changed && round < n; round++ {
			changed = false
			for u := range n {
				if dist[u] == math.MaxInt {
					continue
				}
				for _, e := range g.adj[u] {
					if g.cap[e] > 0 && dist[u]+g.cost[e] < dist[g.to[e]] {
						dist[g.to[e]] = dist[u] + g.cost[e]
						via[g.to[e]] = e
						changed = true
					}
				}
			}
		}
		if dist[sink] == math.MaxInt {
			return
		}
		push := math.MaxInt
		for v := sink; v != src; v = g.to[via[v]^1] {
			push = min(push, g.cap[via[v]])
		}
		for v := sink; v != src; v = g.to[via[v]^1] {
			g.cap[via[v]] -= push
			g.cap[via[v]^1] += push
		}
	}
}
