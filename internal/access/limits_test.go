package access_test

import (
	"fmt"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// TestLimitsOfHomelab names each kind of party's bounds per connection:
// subscriptions from what it follows (the seat every bucket, a client its
// node's, a plain module none), payload from the largest value it writes,
// and in mesh-requests the vault's askers' bound.
func TestLimitsOfHomelab(t *testing.T) {
	ps := homelab(t)
	for _, c := range []struct {
		user string
		acc  access.Account
		want access.Limits
	}{
		// 22 buckets followed: 64 + 8*22 = 240.
		{"mesh-provisioner", access.Storage, access.Limits{Subs: 256, Payload: access.PayloadRequest + access.MaxValue}},
		{"mesh-provisioner", access.Services, access.Limits{Subs: 128, Payload: access.MaxValue}},
		{"mesh-provisioner", access.Requests, access.Limits{Subs: 128, Payload: access.MaxSharedValue}},
		{"operator", access.Storage, access.Limits{Subs: 256, Payload: access.PayloadRequest + access.MaxValue}},
		{"client-ace", access.Storage, access.Limits{Subs: 256, Payload: access.PayloadRequest + access.MaxSharedValue}},
		{"postgres", access.Storage, access.Limits{Subs: 128, Payload: access.PayloadRequest + access.MaxSharedValue}},
		{"mesh-vault", access.Services, access.Limits{Subs: 128, Payload: access.MaxValue}},
		{"redis", access.Storage, access.Limits{Subs: access.SubsBase, Payload: access.PayloadRequest}},
		// Asking the vault only: a request is a key and a node.
		{"redis", access.Requests, access.Limits{Subs: 128, Payload: access.MaxVaultRequest}},
		{"client-ace", access.Requests, access.Limits{Subs: 128, Payload: access.MaxVaultRequest}},
		{"postgres", access.Requests, access.Limits{Subs: 128, Payload: access.MaxVaultRequest}},
		{"operator", access.Requests, access.Limits{Subs: 128, Payload: access.MaxSharedValue}},
	} {
		if got := ps[c.user].LimitsIn(c.acc); got != c.want {
			t.Errorf("%s in %s: %+v; want %+v", c.user, c.acc, got, c.want)
		}
	}
}

// TestLimitsFollowTheMesh: a party's subscriptions grow with the buckets
// it follows, not with the nodes (the seat of 1,000 nodes has the
// homelab's bound); each account's connections cover ConnsPerInstance per
// party instance at any size, and a node joining changes no bound until
// one doubles.
func TestLimitsFollowTheMesh(t *testing.T) {
	mesh := func(nodes, providers int) []access.Party {
		m := access.Mesh{Placement: map[string][]string{}}
		for i := range providers {
			p := fmt.Sprintf("p%d", i)
			m.Modules = append(m.Modules, p)
			m.Providers = append(m.Providers, p)
		}
		m.Modules = append(m.Modules, "tools")
		for i := range nodes {
			n := fmt.Sprintf("n%d", i)
			m.Nodes = append(m.Nodes, n)
			m.Placement[n] = []string{"tools"} // on every node
		}
		ps, err := access.Parties(m)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	seat := func(ps []access.Party) access.Party {
		for _, p := range ps {
			if p.User == access.SeatUser {
				return p
			}
		}
		t.Fatal("no seat")
		return access.Party{}
	}
	small, large := mesh(4, 2), mesh(1000, 2)
	if a, b := seat(small).LimitsIn(access.Storage), seat(large).LimitsIn(access.Storage); a != b {
		t.Errorf("the seat's limits at 4 nodes %+v, at 1,000 %+v; want the same (it follows buckets, not nodes)", a, b)
	}
	if a, b := seat(mesh(4, 2)).LimitsIn(access.Storage).Subs, seat(mesh(4, 40)).LimitsIn(access.Storage).Subs; b <= a {
		t.Errorf("the seat's subscriptions with 2 providers %d, with 40 %d; want more with more buckets to follow", a, b)
	}
	for _, nodes := range []int{1, 4, 100, 1000, 10000} {
		ps := mesh(nodes, 2)
		for _, acc := range access.Accounts {
			instances := 0
			for _, p := range ps {
				for _, a := range p.Accounts() {
					if a != acc {
						continue
					}
					instances++
					if p.Module == "tools" {
						instances += nodes - 1
					}
				}
			}
			lim := access.AccountLimitsOf(ps, acc)
			if lim.Conns < int64(access.ConnsPerInstance*instances) || lim.Leafs < int64(access.LeafsPerNode*nodes) {
				t.Errorf("%s at %d nodes: %+v; want at least %d connections (%d instances) and %d leafnode links",
					acc, nodes, lim, access.ConnsPerInstance*instances, instances, access.LeafsPerNode*nodes)
			}
		}
	}
	if a, b := access.AccountLimitsOf(mesh(100, 2), access.Storage), access.AccountLimitsOf(mesh(101, 2), access.Storage); a != b {
		t.Errorf("the mesh account at 100 nodes %+v, at 101 %+v; want the same (a bound changes when it doubles)", a, b)
	}
}
