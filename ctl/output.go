package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// apiVersion and the kinds name what -o json and yaml print, as kubectl's
// printers want every object typed.
const apiVersion = "mesh-cni.io/v1"

// output is a command's -o flag: "" or text and wide are the command's own
// text, anything else goes to cli-runtime's printers (json, yaml,
// jsonpath=..., go-template=...).
type output struct{ flags *genericclioptions.PrintFlags }

func addOutput(cmd *cobra.Command) *output {
	o := &output{flags: genericclioptions.NewPrintFlags("")}
	o.flags.AddFlags(cmd)
	f := cmd.Flags().Lookup("output")
	f.Usage = "output format: text, wide, json, yaml, jsonpath=..., go-template=... (default text)"
	cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"text", "wide", "json", "yaml", "jsonpath=", "go-template="}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	return o
}

func (o *output) format() string { return *o.flags.OutputFormat }

// text says whether the command prints its own text (and wide: more of it).
func (o *output) text() (text, wide bool) {
	switch o.format() {
	case "", "text":
		return true, false
	case "wide":
		return true, true
	}
	return false, false
}

// validate refuses a format no printer has, before any API call.
func (o *output) validate() error {
	if text, _ := o.text(); text {
		return nil
	}
	if o.format() == "name" {
		return usagef("-o name: the output is no API object; want text, wide, json, yaml, jsonpath or go-template")
	}
	if _, err := o.flags.ToPrinter(); err != nil {
		return usagef("-o %s: want text, wide, json, yaml, jsonpath=... or go-template=...", o.format())
	}
	return nil
}

// print prints v, typed as kind, with the printer -o names.
func (o *output) print(w io.Writer, kind string, v any) error {
	p, err := o.flags.ToPrinter()
	if err != nil {
		return usageError{err}
	}
	return p.PrintObj(&object{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, v: v}, w)
}

// object gives a plain report the type fields kubectl's printers need.
type object struct {
	metav1.TypeMeta
	v any
}

func (o *object) DeepCopyObject() runtime.Object { c := *o; return &c }

// MarshalJSON is v's JSON object with apiVersion and kind first.
func (o *object) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(o.v)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("%s is not a JSON object", o.Kind)
	}
	head, err := json.Marshal(o.TypeMeta)
	if err != nil {
		return nil, err
	}
	if string(b) == "{}" {
		return head, nil
	}
	return slices.Concat(head[:len(head)-1], []byte(","), b[1:]), nil
}
