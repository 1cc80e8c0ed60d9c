package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Range is a token range as it appears in an Assignment's JSON: inclusive
// bounds written as strings, so that no JSON reader rounds them.
type Range struct {
	Min int64 `json:"min,string"`
	Max int64 `json:"max,string"`
}

// TokenRange converts r.
func (r Range) TokenRange() eventstore.TokenRange {
	return eventstore.TokenRange{Min: r.Min, Max: r.Max}
}

func rangeOf(r eventstore.TokenRange) Range { return Range{Min: r.Min, Max: r.Max} }

// String formats r as "[min, max]".
func (r Range) String() string { return fmt.Sprintf("[%d, %d]", r.Min, r.Max) }

// Assignment is who holds which range of the ring: a master's view (its
// registered slaves and the slices it published), a slave's view (its
// slices and their split among its orchestrators), or both merged by
// FetchAssignment. It is the JSON of /readyz and of `sagactl ring`.
type Assignment struct {
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
	// Role is "master", "slave" or "cluster" (FetchAssignment's merge).
	Role string `json:"role"`
	// ID and Addr identify the node that answered.
	ID   string `json:"id,omitempty"`
	Addr string `json:"addr,omitempty"`
	// At is when the view was taken.
	At time.Time `json:"at"`
	// Connected: a slave is registered with its master right now.
	Connected bool `json:"connected,omitempty"`
	// Slaves are the slaves registered with the master, in slot order.
	Slaves []SlaveInfo `json:"slaves,omitempty"`
	// Minutes are the minutes not yet over, ascending: the current one and
	// the next one when it was published.
	Minutes []MinuteAssignment `json:"minutes"`
}

// SlaveInfo is a slave registered with the master.
type SlaveInfo struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Slot is its 0-based position in the master's registry.
	Slot int `json:"slot"`
	// Nodes is how many retry nodes stream from it, as it last told the
	// master; a slave with none gets no slice while another has some.
	Nodes int `json:"nodes"`
}

// MinuteAssignment is the split of one minute.
type MinuteAssignment struct {
	ValidForMinute time.Time         `json:"valid_for_minute"`
	ValidUntil     time.Time         `json:"valid_until"`
	Slices         []SliceAssignment `json:"slices"`
}

// SliceAssignment is one slave's slice of a minute.
type SliceAssignment struct {
	// Index and Of place the slice among the minute's.
	Index int   `json:"index"`
	Of    int   `json:"of"`
	Range Range `json:"range"`
	// SlaveID and Addr name its slave; empty for a frozen slice.
	SlaveID string `json:"slave_id,omitempty"`
	Addr    string `json:"addr,omitempty"`
	// Frozen: the slot's slave had left when the minute was published
	// (lazy rebalance): nobody scans the slice this minute.
	Frozen bool `json:"frozen,omitempty"`
	// Pending: the slave had no orchestrator when the slice arrived; it
	// goes whole to the first one that connects before the minute ends.
	Pending bool `json:"pending,omitempty"`
	// Refused: the slave did not split the slice, because one of its
	// retry nodes held a range of the minute from another split (after a
	// restart); nobody scans it this minute.
	Refused bool `json:"refused,omitempty"`
	// Nodes is the slice's split among the slave's orchestrators (retry
	// nodes), when known.
	Nodes []NodeAssignment `json:"nodes,omitempty"`
	// Error tells why Nodes is unknown (slave unreachable).
	Error string `json:"error,omitempty"`
}

// NodeAssignment is a retry node's sub-range of a minute.
type NodeAssignment struct {
	NodeID string `json:"node_id"`
	Range  Range  `json:"range"`
	// Connected: the node's stream from the slave is open now.
	Connected bool `json:"connected"`
}

// FetchAssignment asks the master at addr for its view, then each slave it
// names for its split among retry nodes, and returns the merged view: who
// holds which range for this minute and the next. A slave that cannot be
// asked leaves its slices without nodes, with the reason in their Error.
// Options: WithTransport, WithScope (the region and cluster to ask as;
// by default the master's own), WithToken (the ring's, presented to
// the master and the slaves), WithLogger.
func FetchAssignment(ctx context.Context, addr string, opts ...Option) (Assignment, error) {
	o := build(opts)
	master, err := fetchStatus(ctx, o.transport, addr)
	if err != nil {
		return Assignment{}, fmt.Errorf("ringcoordinator: master %s: %w", addr, err)
	}
	out := master
	out.Role = "cluster"
	views := make(map[string]Assignment)
	errs := make(map[string]error)
	for _, m := range out.Minutes {
		for _, s := range m.Slices {
			if s.SlaveID == "" || s.Addr == "" {
				continue
			}
			if _, ok := views[s.Addr]; ok {
				continue
			}
			if _, ok := errs[s.Addr]; ok {
				continue
			}
			v, err := fetchStatus(ctx, o.transport, s.Addr)
			if err != nil {
				errs[s.Addr] = err
				continue
			}
			views[s.Addr] = v
		}
	}
	for i := range out.Minutes {
		m := &out.Minutes[i]
		for j := range m.Slices {
			s := &m.Slices[j]
			if s.SlaveID == "" {
				continue
			}
			if err, ok := errs[s.Addr]; ok {
				s.Error = err.Error()
				continue
			}
			v := views[s.Addr]
			if v.ID != s.SlaveID {
				s.Error = fmt.Sprintf("slave at %s is now %s", s.Addr, v.ID)
				continue
			}
			for _, vm := range v.Minutes {
				if !vm.ValidForMinute.Equal(m.ValidForMinute) {
					continue
				}
				for _, vs := range vm.Slices {
					if vs.Range == s.Range {
						s.Nodes, s.Pending, s.Refused = vs.Nodes, vs.Pending, vs.Refused
					}
				}
			}
		}
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	return out, nil
}

// fetchStatus asks the node at addr for its Assignment.
func fetchStatus(ctx context.Context, t Transport, addr string) (Assignment, error) {
	conn, err := t.Dial(ctx, addr)
	if err != nil {
		return Assignment{}, err
	}
	defer conn.Close()
	resp, err := conn.RequestResponse(ctx, encode(msgStatus, nil))
	if err != nil {
		return Assignment{}, err
	}
	var a Assignment
	if _, err := decode(resp, msgAssigned, &a); err != nil {
		return Assignment{}, err
	}
	return a, nil
}

// FormatAssignment writes a as a table for people: per minute, each slice
// with its slave and, below it, each retry node's sub-range. now marks the
// current minute.
func FormatAssignment(w io.Writer, a Assignment, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "region %s, cluster %s", a.Region, a.Cluster)
	if a.Addr != "" {
		fmt.Fprintf(tw, ", master %s", a.Addr)
	}
	fmt.Fprintf(tw, ", at %s\n", a.At.UTC().Format(time.RFC3339Nano))
	if len(a.Minutes) == 0 {
		fmt.Fprintln(tw, "no range published for this minute or the next (no slave registered yet, or the first publish is still ahead)")
	}
	minutes := append([]MinuteAssignment(nil), a.Minutes...)
	sort.Slice(minutes, func(i, j int) bool { return minutes[i].ValidForMinute.Before(minutes[j].ValidForMinute) })
	for _, m := range minutes {
		label := "next"
		if !now.Before(m.ValidForMinute) && now.Before(m.ValidUntil) {
			label = "current"
		} else if !now.Before(m.ValidUntil) {
			label = "past"
		}
		fmt.Fprintf(tw, "\nminute %s .. %s (%s)\n", m.ValidForMinute.UTC().Format("15:04:05.000"), m.ValidUntil.UTC().Format("15:04:05.000"), label)
		fmt.Fprintln(tw, "  slice\tholder\trange min\trange max\t")
		for _, s := range m.Slices {
			holder := "slave " + s.SlaveID + " @ " + s.Addr
			switch {
			case s.Frozen:
				holder = "frozen (its slave left)"
			case s.Pending:
				holder += " (pending: no retry node yet)"
			case s.Refused:
				holder += " (refused: its retry nodes held the minute from another split)"
			}
			fmt.Fprintf(tw, "  %d/%d\t%s\t%d\t%d\t\n", s.Index+1, s.Of, holder, s.Range.Min, s.Range.Max)
			for _, n := range s.Nodes {
				state := ""
				if !n.Connected {
					state = " (disconnected)"
				}
				fmt.Fprintf(tw, "  \t  node %s%s\t%d\t%d\t\n", n.NodeID, state, n.Range.Min, n.Range.Max)
			}
			if s.Error != "" {
				fmt.Fprintf(tw, "  \t  nodes unknown: %s\t\t\t\n", strings.ReplaceAll(s.Error, "\n", " "))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("ringcoordinator: format assignment: %w", err)
	}
	return nil
}

// errStopped is returned by roles whose Run was called twice.
var errStopped = errors.New("ringcoordinator: already run")
