package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
	"sigs.k8s.io/yaml/kyaml"
)

// apiVersion and the kinds name what -o json and yaml print, as kubectl
// prints every object typed.
const apiVersion = "mesh-cni.io/v1"

// output is a command's -o flag: "" or text and wide are the command's own
// text; json, yaml (and kyaml) and jsonpath print the report as kubectl
// does, with kubectl's flags for them. Not go-template: its text/template
// calls methods by name, which makes the linker keep every exported method
// of every type in the binary (client-go's typed clients: the binary grew
// from 28 to 50 MB with it).
type output struct {
	format string
	// template is --template: the jsonpath when -o names only the format.
	template         string
	allowMissingKeys bool
	// showManagedFields is kubectl's flag, accepted: the reports carry no
	// managedFields to hide.
	showManagedFields bool
}

// formats is what -o takes and completes.
const formats = "text, wide, json, yaml, jsonpath=..., jsonpath-as-json=..., jsonpath-file=..."

func addOutput(cmd *cobra.Command) *output {
	o := &output{allowMissingKeys: true}
	fs := cmd.Flags()
	fs.BoolVar(&o.showManagedFields, "show-managed-fields", false, "If true, keep the managedFields when printing objects in JSON or YAML format.")
	fs.StringVar(&o.template, "template", "", "Template string or path to template file to use when --output=jsonpath, --output=jsonpath-file.")
	_ = cmd.MarkFlagFilename("template")
	fs.BoolVar(&o.allowMissingKeys, "allow-missing-template-keys", true, "If true, ignore any errors in templates when a field or map key is missing in the template. Only applies to golang and jsonpath output formats.")
	fs.StringVarP(&o.format, "output", "o", "", "output format: "+formats+" (default text)")
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

// printFunc prints one typed report.
type printFunc func(w io.Writer, obj *object) error

// printer is the printer -o names. json and yaml are case-blind, as
// kubectl's are.
func (o *output) printer() (printFunc, error) {
	switch strings.ToLower(o.format) {
	case "json":
		return printJSON, nil
	case "yaml":
		return printYAML, nil
	case "kyaml":
		return printKYAML, nil
	}
	return o.jsonPath()
}

// jsonPath is the printer of -o jsonpath=T, jsonpath-as-json=T and
// jsonpath-file=PATH; with --template, -o names only the format.
func (o *output) jsonPath() (printFunc, error) {
	format, tmpl := o.format, o.template
	if tmpl == "" {
		format, tmpl, _ = strings.Cut(o.format, "=")
	}
	switch format {
	case "jsonpath", "jsonpath-as-json", "jsonpath-file":
	default:
		return nil, usagef("-o %s: want %s", o.format, "text, wide, json, yaml, jsonpath=..., jsonpath-as-json=... or jsonpath-file=...")
	}
	if tmpl == "" {
		return nil, usagef("-o %s: no template given", o.format)
	}
	if format == "jsonpath-file" {
		b, err := os.ReadFile(tmpl)
		if err != nil {
			return nil, usagef("-o %s: read the template: %w", o.format, err)
		}
		tmpl = string(b)
	}
	j := jsonpath.New("out")
	if err := j.Parse(tmpl); err != nil {
		return nil, usagef("-o %s: parse the jsonpath %s: %w", o.format, tmpl, err)
	}
	j.AllowMissingKeys(o.allowMissingKeys)
	j.EnableJSONOutput(format == "jsonpath-as-json")
	return func(w io.Writer, obj *object) error {
		// The jsonpath walks the JSON form, as kubectl's does: field
		// names are the JSON tags.
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		var data any
		if err := json.Unmarshal(b, &data); err != nil {
			return err
		}
		if err := j.Execute(w, data); err != nil {
			return fmt.Errorf("-o %s: %w", o.format, err)
		}
		return nil
	}, nil
}

func printJSON(w io.Writer, obj *object) error {
	b, err := json.MarshalIndent(obj, "", "    ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func printYAML(w io.Writer, obj *object) error {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func printKYAML(w io.Writer, obj *object) error {
	return (&kyaml.Encoder{}).FromObject(obj, w)
}

// validate refuses a format no printer has, before any API call.
func (o *output) validate() error {
	if text, _ := o.text(); text {
		return nil
	}
	_, err := o.printer()
	return err
}

// print prints v, typed as kind, with the printer -o names.
func (o *output) print(w io.Writer, kind string, v any) error {
	p, err := o.printer()
	if err != nil {
		return err
	}
	return p(w, &object{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, v: v})
}

// object gives a plain report the type fields kubectl's printers print.
type object struct {
	metav1.TypeMeta
	v any
}

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
