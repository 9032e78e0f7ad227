package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newAsksCmd) }

// requestTimeout bounds one request of a command to a running mesh.
const requestTimeout = 10 * time.Second

// askView is one open ask as `asks -o json` prints it: the ask, the
// provision key it is about (for an ask about "provision.<key>") and that
// key's provider, read from mesh-provisioner_provisions.
type askView struct {
	Ask      mesh.Ask  `json:"ask"`
	Key      string    `json:"key,omitempty"`
	Provider *mesh.Ref `json:"provider,omitempty"`
	// State and Warrant are the record's (with --all).
	State   string              `json:"state,omitempty"`
	Warrant *mesh.RecordWarrant `json:"warrant,omitempty"`
}

func newAsksCmd() *cobra.Command {
	var bf busFlags
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "asks [--all]",
		Short: "List the open asks that wait for an operator's answer",
		Long: "asks lists the open asks, soonest expiry first, through the ask router (mesh-asks.list): each\n" +
			"ask's id, headline, the provision key it is about, that key's provider and the provider's node,\n" +
			"when it expires and the options to answer it with (`answer ASK-ID OPTION`).\n\n" +
			"With --all it lists every ask the router keeps, answered and expired too, with its warrant: the\n" +
			"option chosen, who chose it and when (or that it expired, or was withdrawn and why): the audit trail.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			snc, js, err := bf.connect("cli-asks")
			if err != nil {
				return err
			}
			defer snc.Close()
			nc, err := bf.connectAsk("cli-asks")
			if err != nil {
				return err
			}
			defer nc.Close()
			state := mesh.RecordOpen
			if all {
				state = "all"
			}
			var l asks.Listing
			err = bf.retry(cmd.Context(), "asks", func(ctx context.Context) (err error) {
				ctx, cancel := context.WithTimeout(ctx, requestTimeout)
				defer cancel()
				l, err = asks.List(ctx, nc, state)
				return err
			})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			views := make([]askView, 0, len(l.Records))
			provs, _ := js.KeyValue(ctx, mesh.ProvisionsBucket) // nil: no provider shown
			leader := bf.leader(ctx, js)
			for _, rec := range l.Records {
				v := viewOf(ctx, leader, provs, rec.Ask)
				v.State, v.Warrant = rec.State, rec.Warrant
				views = append(views, v)
			}
			if output == "json" || output == "yaml" {
				return writeData(cmd.OutOrStdout(), output, struct {
					Asks []askView  `json:"asks"`
					Odd  []asks.Odd `json:"odd,omitempty"`
				}{views, l.Odd})
			}
			for _, o := range l.Odd {
				fmt.Fprintf(cmd.ErrOrStderr(), "odd record %s: %s\n", o.Key, o.Why)
			}
			if all {
				return printTrail(cmd.OutOrStdout(), views, output == "wide")
			}
			return printAsks(cmd.OutOrStdout(), views, output == "wide")
		},
	}
	bf.add(cmd)
	bf.addTimeout(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "every ask, answered and expired too, with its warrant (who, when, option)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table (fits the terminal; ids and keys whole), wide, json or yaml")
	return cmd
}

// viewOf finds the provision key an ask is about and that key's provider
// (one get of the key in provs, from its stream's leader through js unless
// js is nil). An ask about something else, or a key no
// longer in the bucket, has no provider.
func viewOf(ctx context.Context, js jetstream.JetStream, provs jetstream.KeyValue, a mesh.Ask) askView {
	v := askView{Ask: a}
	key, ok := strings.CutPrefix(a.About, "provision.")
	if !ok {
		return v
	}
	v.Key = key
	if provs == nil {
		return v
	}
	e, err := lookup.Get(ctx, js, provs, key)
	if err != nil {
		return v
	}
	var p mesh.Provision
	if json.Unmarshal(e.Value, &p) == nil && p.Provider.Module != "" {
		v.Provider = &p.Provider
	}
	return v
}

// printAsks writes views as a table (fit to 120 columns unless wide).
func printAsks(w io.Writer, views []askView, wide bool) error {
	if len(views) == 0 {
		_, err := fmt.Fprintln(w, "no open asks")
		return err
	}
	var rows [][]string
	for _, v := range views {
		key, provider, node := or(v.Key, v.Ask.About), "-", "-"
		if v.Provider != nil {
			provider, node = v.Provider.Module, v.Provider.Node
		}
		opts := make([]string, len(v.Ask.Options))
		for i, o := range v.Ask.Options {
			opts[i] = o.ID + " (" + o.Label + ")"
		}
		rows = append(rows, []string{v.Ask.ID, v.Ask.Headline, key, provider, node,
			v.Ask.Expires.UTC().Format(time.RFC3339), strings.Join(opts, ", ")})
	}
	return writeTable(w, []string{"ASK", "HEADLINE", "KEY", "PROVIDER", "NODE", "EXPIRES", "OPTIONS"}, rows, wide)
}

// printTrail writes every ask with how it ended: state, option, by whom
// and when.
func printTrail(w io.Writer, views []askView, wide bool) error {
	if len(views) == 0 {
		_, err := fmt.Fprintln(w, "no asks")
		return err
	}
	var rows [][]string
	for _, v := range views {
		option, by, at := "-", "-", "-"
		if wa := v.Warrant; wa != nil {
			option = or(wa.Option, wa.Outcome)
			by = or(wa.By.Who, wa.By.Identity)
			if wa.By.Kind == mesh.KindWithdrawn {
				option, by = "withdrawn", by+": "+wa.Why
			}
			at = wa.At.UTC().Format(time.RFC3339)
		}
		rows = append(rows, []string{v.Ask.ID, v.State, option, by, at, or(v.Key, v.Ask.About)})
	}
	return writeTable(w, []string{"ASK", "STATE", "OPTION", "BY", "AT", "KEY"}, rows, wide)
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// noArgs refuses arguments as a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{errors.New("takes no arguments, got " + strings.Join(args, " "))}
	}
	return nil
}
