package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

var subcommands = []string{"check", "explain", "version", "completion"}

// installed links the built binary under both its names into a dir.
func installed(t *testing.T) string {
	t.Helper()
	bin := testenv.GoBinary(t, "cmd/mesh-cnictl", "mesh-cnictl")
	dir := t.TempDir()
	for _, name := range []string{"mesh-cnictl", PluginName} {
		if err := os.Symlink(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every shell's script is generated under either name and registers that
// name; the scripts ask the binary for the words (cobra's __complete), so
// the subcommands and the kube flags are checked through that, and for
// bash by running the script's completion function in bash itself.
func TestCompletion(t *testing.T) {
	dir := installed(t)
	for _, name := range []string{"mesh-cnictl", PluginName} {
		bin := filepath.Join(dir, name)
		for _, shell := range []string{"bash", "zsh", "fish"} {
			out, err := exec.Command(bin, "completion", shell).Output()
			if err != nil || len(out) == 0 {
				t.Fatalf("%s completion %s: %v, %d bytes", name, shell, err, len(out))
			}
			s := string(out)
			if !strings.Contains(s, name) || !strings.Contains(s, "__complete") {
				t.Errorf("%s completion %s: does not register %s or ask it for words:\n%.300s", name, shell, name, s)
			}
			if shell == "bash" {
				if msg, err := exec.Command("bash", "-n", "-c", s).CombinedOutput(); err != nil {
					t.Errorf("%s completion bash: bash -n: %v\n%s", name, err, msg)
				}
			}
		}

		// What the scripts ask: the subcommands, then check's flags with
		// the kube ones.
		words, err := exec.Command(bin, "__complete", "").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range subcommands {
			if !strings.Contains(string(words), "\n"+c+"\t") && !strings.HasPrefix(string(words), c+"\t") {
				t.Errorf("%s __complete: no %s:\n%s", name, c, words)
			}
		}

		// bash, for real: the registered function fills COMPREPLY. The
		// script takes the words from the bash-completion package's
		// _get_comp_words_by_ref; without the package, a stand-in that
		// splits as it does for these plain words.
		complete := func(line ...string) string {
			script := `if [ -r /usr/share/bash-completion/bash_completion ]; then . /usr/share/bash-completion/bash_completion
else _get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cword=$COMP_CWORD; words=("${COMP_WORDS[@]}"); }; fi
source <("$BIN" completion bash) && COMP_WORDS=("$@") && COMP_CWORD=$(($# - 1)) &&
COMP_LINE="$*" && COMP_POINT=${#COMP_LINE} && __start_` + name + ` && printf '%s\n' "${COMPREPLY[@]}"`
			cmd := exec.Command("bash", append([]string{"-c", script, "bash", name}, line...)...)
			cmd.Env = append(os.Environ(), "BIN="+bin, "PATH="+dir+":"+os.Getenv("PATH"))
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("bash completion of %q: %v\n%s", line, err, errb.String())
			}
			return string(out)
		}
		got := complete("")
		for _, c := range subcommands {
			if !strings.Contains("\n"+got, "\n"+c+"\n") {
				t.Errorf("bash: %s <TAB> lacks %s:\n%s", name, c, got)
			}
		}
		got = complete("check", "--")
		for _, f := range []string{"--kubeconfig", "--context", "--namespace", "--as", "--output", "--pre"} {
			if !strings.Contains("\n"+got, "\n"+f+"\n") && !strings.Contains("\n"+got, "\n"+f+"=\n") {
				t.Errorf("bash: %s check --<TAB> lacks %s:\n%s", name, f, got)
			}
		}
		if got = complete("check", "-o", ""); !strings.Contains(got, "json") || !strings.Contains(got, "wide") {
			t.Errorf("bash: %s check -o <TAB>:\n%s", name, got)
		}
	}
}

// One binary, either name: the same commands; the help names it as kubectl
// does a plugin.
func TestNames(t *testing.T) {
	dir := installed(t)
	for name, want := range map[string]string{"mesh-cnictl": "mesh-cnictl explain", PluginName: "kubectl mesh-cni explain"} {
		out, err := exec.Command(filepath.Join(dir, name), "explain", "--help").Output()
		if err != nil || !strings.Contains(string(out), want+" [NAMESPACE/]POD") {
			t.Errorf("%s explain --help (%v): want %q:\n%s", name, err, want, out)
		}
		out, err = exec.Command(filepath.Join(dir, name), "version", "--client").Output()
		if err != nil || !strings.HasPrefix(string(out), name+" ") {
			t.Errorf("%s version --client (%v): %s", name, err, out)
		}
		out, err = exec.Command(filepath.Join(dir, name), "explain", "--profile", "linkerd", "--annotation", "linkerd.io/inject=enabled",
			"--annotation", "linkerd.io/proxy-version=stable", "--format", "nft").Output()
		if err != nil || !strings.Contains(string(out), "4140") {
			t.Errorf("%s explain (%v):\n%s", name, err, out)
		}
	}
}

// Nothing may execute a text/template (kubectl's go-template printer, a
// custom cobra help template): it calls methods by name, which makes the
// linker keep every exported method of every type, and the binary grew
// from 28 to 50 MB when it did.
func TestNoTemplateExecution(t *testing.T) {
	f, err := elf.Open(testenv.GoBinary(t, "cmd/mesh-cnictl", "mesh-cnictl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "text/template.(*state).eval") {
			t.Fatalf("the binary links %s: a text/template is executed somewhere", s.Name)
		}
	}
}

// kubectl 1.26+ completes "kubectl mesh-cni ..." by running
// kubectl_complete-mesh_cni from the PATH; the shim the CLI prints hands
// the words to the plugin's __complete. Run as kubectl runs it, and
// through kubectl itself when one is at hand.
func TestKubectlCompletionShim(t *testing.T) {
	dir := installed(t)
	shim, err := exec.Command(filepath.Join(dir, PluginName), "completion", "kubectl").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CompletionShim), shim, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	complete := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %q: %v", name, args, err)
		}
		return string(out)
	}
	got := complete(filepath.Join(dir, CompletionShim), "")
	for _, c := range subcommands {
		if !strings.Contains("\n"+got, "\n"+c+"\t") {
			t.Errorf("%s '': no %s:\n%s", CompletionShim, c, got)
		}
	}
	if got = complete(filepath.Join(dir, CompletionShim), "explain", "--"); !strings.Contains(got, "--check\t") || !strings.Contains(got, "--agent-namespace\t") {
		t.Errorf("%s explain --: no --check:\n%s", CompletionShim, got)
	}
	kubectl, err := exec.LookPath(filepath.Join(testenv.BinDir(), "kubectl"))
	if err != nil {
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			t.Log("no kubectl here: the shim was run as kubectl runs it, not through kubectl")
			return
		}
	}
	if got = complete(kubectl, "__complete", "mesh-cni", ""); !strings.Contains(got, "explain\t") {
		t.Errorf("kubectl __complete mesh-cni '':\n%s", got)
	}
}
