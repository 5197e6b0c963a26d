package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// apiVersion and the kinds name what -o json and yaml print, as kubectl's
// printers want every object typed.
const apiVersion = "mesh-cni.io/v1"

// output is a command's -o flag: "" or text and wide are the command's own
// text; json, yaml and jsonpath go to cli-runtime's printers, with
// kubectl's flags for them. Not go-template: its text/template calls
// methods by name, which makes the linker keep every exported method of
// every type in the binary (client-go's typed clients: the binary grew
// from 28 to 50 MB with it).
type output struct {
	format   string
	jsonYAML *genericclioptions.JSONYamlPrintFlags
	jsonPath *genericclioptions.JSONPathPrintFlags
}

func addOutput(cmd *cobra.Command) *output {
	o := &output{jsonYAML: genericclioptions.NewJSONYamlPrintFlags(), jsonPath: genericclioptions.NewJSONPathPrintFlags("", true)}
	o.jsonYAML.AddFlags(cmd)
	o.jsonPath.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "output format: text, wide, json, yaml, jsonpath=..., jsonpath-as-json=..., jsonpath-file=... (default text)")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"text", "wide", "json", "yaml", "jsonpath=", "jsonpath-as-json=", "jsonpath-file="}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	return o
}

// text says whether the command prints its own text (and wide: more of it).
func (o *output) text() (text, wide bool) {
	switch o.format {
	case "", "text":
		return true, false
	case "wide":
		return true, true
	}
	return false, false
}

// printer is the cli-runtime printer -o names.
func (o *output) printer() (printers.ResourcePrinter, error) {
	if p, err := o.jsonYAML.ToPrinter(o.format); !genericclioptions.IsNoCompatiblePrinterError(err) {
		return p, err
	}
	if p, err := o.jsonPath.ToPrinter(o.format); !genericclioptions.IsNoCompatiblePrinterError(err) {
		return p, err
	}
	return nil, usagef("-o %s: want text, wide, json, yaml, jsonpath=..., jsonpath-as-json=... or jsonpath-file=...", o.format)
}

// validate refuses a format no printer has, before any API call.
func (o *output) validate() error {
	if text, _ := o.text(); text {
		return nil
	}
	if _, err := o.printer(); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// print prints v, typed as kind, with the printer -o names.
func (o *output) print(w io.Writer, kind string, v any) error {
	p, err := o.printer()
	if err != nil {
		return err
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
