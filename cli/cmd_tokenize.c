/* cmd_tokenize.c — `gate tokenize` and `gate detokenize` (see cmd_tokenize.h).
 *
 * Invariants: the model is opened with GGUF_OPEN_METADATA_ONLY and closed right after tok_load(),
 * so no tensor byte is ever needed; text is handled as raw bytes end to end (a --text-file may
 * hold NUL and invalid UTF-8; what the tokenizer does with the latter is in docs/tokenizer.md:
 * U+FFFD per maximal ill-formed subpart, as Hugging Face users get); detokenize writes the exact
 * bytes of the ids, with no newline added and no UTF-8 repair. Start reading: cmd_tokenize().
 */
#include "cli/cmd_tokenize.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/gguf.h"

static const char TOKENIZE_USAGE[] =
    "usage: gate tokenize MODEL.gguf (--text TEXT | --text-file FILE)... [--ids | --json]\n"
    "                     [--no-special]\n"
    "  Tokenizes the text with the model's tokenizer (tokenizer.* metadata only: a\n"
    "  vocabulary-only GGUF is enough). The text is raw bytes: --text-file may hold newlines,\n"
    "  NUL and invalid UTF-8 (--text cannot carry NUL); FILE '-' is standard input. Invalid\n"
    "  UTF-8 becomes U+FFFD, one per maximal ill-formed subpart (as Python's\n"
    "  bytes.decode('utf-8', 'replace')), before NFC normalization. No BOS/EOS is added.\n"
    "  Several --text/--text-file inputs are tokenized separately, in order, one output block\n"
    "  (or --ids line, or --json line) each; the first input that fails stops the command.\n"
    "  --no-special  control tokens written in the text (<|im_start|>, ...) are plain text;\n"
    "                user-defined ones (<think>, ...) still match, as in llama.cpp\n"
    "  (default)     one row per token: index, id, piece (its bytes, quoted, with \\n \\t \\r\n"
    "                \\\\ \\\" and \\xNN escapes), and the type of special tokens; with several\n"
    "                inputs each block starts with '# SOURCE: N bytes, N tokens'\n"
    "  --ids         the ids only, separated by spaces, one line per input\n"
    "  --json        one JSON object per input and line: source, n_tokens, ids, and tokens\n"
    "                [{index, id, piece (escaped as above), hex (its exact bytes), type}]\n"
    "  Exit codes: 0 ok, 2 usage or input error (missing file, no tokenizer), 3 environment.\n";

static const char DETOKENIZE_USAGE[] =
    "usage: gate detokenize MODEL.gguf (--ids \"ID ID ...\" | --ids-file FILE)\n"
    "  Writes the exact bytes the token ids stand for to standard output: no newline added,\n"
    "  no UTF-8 repair (ids that split a character give its partial bytes). Ids are decimal,\n"
    "  separated by whitespace or commas ([ ] are skipped, so a JSON array works; FILE '-' is\n"
    "  standard input). Special tokens give their text; unused padding tokens give nothing.\n"
    "  Exit codes: 0 ok, 2 usage or input error (missing file, no tokenizer, a non-numeric id,\n"
    "  an id outside the vocabulary: the message names it), 3 environment error.\n";

/* ---- helpers shared with the tests ---------------------------------------------------------- */

int cmd_tokenize_load(struct tok **out, const char *path, struct gate_err *err)
{
    *out = NULL;
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, path, GGUF_OPEN_METADATA_ONLY, err);
    if (rc)
        goto done;
    if (!gguf_find_kv(f, "tokenizer.ggml.model")) {
        rc = err_set(err, ERR_INPUT,
                     "'%s' has no tokenizer (no tokenizer.ggml.model key in its metadata)", path);
        goto done;
    }
    rc = tok_load(out, f, err);
done:
    gguf_close(f);
    return rc;
}

/* Length of the well-formed UTF-8 character at p[0..n) (Unicode Table 3-7), 0 if ill-formed. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (p[k] < 0x80 || p[k] > 0xBF)
            return 0;
    return len;
}

char *cmd_tokenize_escape(const char *text, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    char *out = malloc(4 * n + 1); /* \xNN is the longest form of one byte */
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t len = utf8_len(p + i, n - i);
        if (c == '\\' || c == '"') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if ((c >= 0x20 && c < 0x7F) || (len > 1 && !(c == 0xC2 && p[i + 1] < 0xA0))) {
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
            continue;
        } else {
            /* other controls, DEL, C1 controls (C2 80..9F) and ill-formed bytes, one at a time */
            o += (size_t)sprintf(out + o, "\\x%02X", c);
            if (len == 2) {
                o += (size_t)sprintf(out + o, "\\x%02X", p[i + 1]);
                i++;
            }
        }
        i++;
    }
    out[o] = '\0';
    return out;
}

char *cmd_tokenize_format_ids(const int32_t *ids, int n)
{
    char *out = malloc((size_t)(n > 0 ? n : 0) * 12 + 2); /* "-2147483648 " is 12 chars */
    if (!out)
        return NULL;
    size_t o = 0;
    for (int i = 0; i < n; i++)
        o += (size_t)sprintf(out + o, i ? " %" PRId32 : "%" PRId32, ids[i]);
    out[o++] = '\n';
    out[o] = '\0';
    return out;
}

/* ---- input and output ----------------------------------------------------------------------- */

/* Read all of path ("-": standard input) as bytes. *buf is malloc'd (NUL-terminated for
 * convenience, *len excludes it). A file that cannot be opened is an input error naming it. */
static int read_all(const char *path, char **buf, size_t *len, struct gate_err *err)
{
    int rc = 0, use_stdin = !strcmp(path, "-");
    size_t cap = 1 << 16, n = 0;
    char *b = NULL;
    *buf = NULL;
    *len = 0;
    FILE *f = use_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return err_set(err, errno == ENOMEM ? ERR_ENV : ERR_INPUT, "cannot open '%s': %s", path,
                       strerror(errno));
    b = malloc(cap);
    if (!b) {
        rc = err_set(err, ERR_ENV, "out of memory reading '%s'", path);
        goto done;
    }
    for (;;) {
        if (cap - n < 2) {
            char *p = realloc(b, 2 * cap);
            if (!p) {
                rc =
                    err_set(err, ERR_ENV, "out of memory reading '%s' (%zu bytes so far)", path, n);
                goto done;
            }
            b = p;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                rc = err_set(err, errno == EISDIR ? ERR_INPUT : ERR_ENV, "cannot read '%s': %s",
                             path, strerror(errno));
                goto done;
            }
            break;
        }
    }
    b[n] = '\0';
done:
    if (!use_stdin)
        fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Flush stdout and turn a write failure (full disk, closed pipe) into an environment error. */
static int finish_stdout(const char *cmd)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail(3, "%s: cannot write to standard output: %s", cmd, strerror(errno));
    return 0;
}

static const char *type_name(int type)
{
    switch (type) {
    case TOK_TYPE_NORMAL:
        return "normal";
    case TOK_TYPE_UNKNOWN:
        return "unknown";
    case TOK_TYPE_CONTROL:
        return "control";
    case TOK_TYPE_USER_DEFINED:
        return "user_defined";
    case TOK_TYPE_UNUSED:
        return "unused";
    case TOK_TYPE_BYTE:
        return "byte";
    default:
        return "normal"; /* no token_type array: every token is normal */
    }
}

/* The exact bytes of one token; *out malloc'd. */
static int piece_bytes(const struct tok *t, int32_t id, char **out, size_t *len,
                       struct gate_err *err)
{
    return tok_decode(t, &id, 1, out, len, err);
}

static int print_rows(const struct tok *t, const int32_t *ids, int n, struct gate_err *err)
{
    for (int i = 0; i < n; i++) {
        char *bytes = NULL, *shown = NULL;
        size_t len = 0;
        int rc = piece_bytes(t, ids[i], &bytes, &len, err);
        if (rc)
            return rc;
        shown = cmd_tokenize_escape(bytes, len);
        free(bytes);
        if (!shown)
            return err_set(err, ERR_ENV, "tokenize: out of memory for the escaped text");
        int type = tok_token_type(t, ids[i]);
        printf("%6d %7" PRId32 "  \"%s\"%s%s\n", i, ids[i], shown,
               type != TOK_TYPE_NORMAL && type > 0 ? "  " : "",
               type != TOK_TYPE_NORMAL && type > 0 ? type_name(type) : "");
        free(shown);
    }
    return 0;
}

static int print_json(const struct tok *t, const char *source, const int32_t *ids, int n,
                      struct gate_err *err)
{
    int rc = 0, bad = 0;
    json_t *root = json_object(), *jids = json_array(), *toks = json_array();
    bad |= !root || !jids || !toks;
    if (!bad) {
        json_t *src = json_string(source); /* NULL when the path is not UTF-8 */
        if (!src) {
            char *e = cmd_tokenize_escape(source, strlen(source));
            src = e ? json_string(e) : NULL;
            free(e);
        }
        bad |= json_object_set_new(root, "source", src);
        bad |= json_object_set_new(root, "n_tokens", json_integer(n));
        bad |= json_object_set(root, "ids", jids);
        bad |= json_object_set(root, "tokens", toks);
    }
    for (int i = 0; i < n && !bad && !rc; i++) {
        char *bytes = NULL, *shown = NULL, *hex = NULL;
        size_t len = 0;
        rc = piece_bytes(t, ids[i], &bytes, &len, err);
        if (rc)
            break;
        shown = cmd_tokenize_escape(bytes, len);
        hex = malloc(2 * len + 1);
        if (shown && hex) {
            for (size_t k = 0; k < len; k++)
                sprintf(hex + 2 * k, "%02x", (unsigned char)bytes[k]);
            hex[2 * len] = '\0';
            json_t *o = json_object();
            bad |= !o;
            bad |= json_array_append_new(jids, json_integer(ids[i]));
            if (o) {
                bad |= json_object_set_new(o, "index", json_integer(i));
                bad |= json_object_set_new(o, "id", json_integer(ids[i]));
                bad |= json_object_set_new(o, "piece", json_string(shown));
                bad |= json_object_set_new(o, "hex", json_string(hex));
                bad |= json_object_set_new(o, "type",
                                           json_string(type_name(tok_token_type(t, ids[i]))));
                bad |= json_array_append_new(toks, o);
            }
        } else {
            bad = 1;
        }
        free(hex);
        free(shown);
        free(bytes);
    }
    if (!rc && bad)
        rc = err_set(err, ERR_ENV, "out of memory building the JSON output");
    if (!rc) {
        char *s = json_dumps(root, JSON_COMPACT);
        if (!s)
            rc = err_set(err, ERR_ENV, "out of memory writing the JSON output");
        else
            printf("%s\n", s);
        free(s);
    }
    json_decref(toks);
    json_decref(jids);
    json_decref(root);
    return rc;
}

/* ---- gate tokenize -------------------------------------------------------------------------- */

/* One input: argv's --text value or --text-file path (borrowed from argv). */
struct input {
    const char *text; /* --text value, or NULL */
    const char *path; /* --text-file path, or NULL */
};

/* Tokenize one input and print it in the chosen form. */
static int tokenize_one(const struct tok *t, const struct input *in, int n_inputs,
                        int parse_special, int form, struct gate_err *err)
{
    char *buf = NULL, *line = NULL;
    size_t len = in->text ? strlen(in->text) : 0;
    int32_t *ids = NULL;
    int n = 0, rc = 0;
    const char *source = in->path ? in->path : "--text";
    if (in->path)
        rc = read_all(in->path, &buf, &len, err);
    if (!rc)
        rc = tok_encode(t, in->text ? in->text : buf, len, parse_special, &ids, &n, err);
    if (!rc && form == 'i') {
        line = cmd_tokenize_format_ids(ids, n);
        if (!line)
            rc = err_set(err, ERR_ENV, "out of memory formatting %d ids", n);
        else
            fputs(line, stdout);
    } else if (!rc && form == 'j') {
        rc = print_json(t, source, ids, n, err);
    } else if (!rc) {
        if (n_inputs > 1)
            printf("# %s: %zu bytes, %d tokens\n", source, len, n);
        rc = print_rows(t, ids, n, err);
    }
    free(line);
    free(ids);
    free(buf);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int form = 'r', no_special = 0, n_inputs = 0, rc = 0;
    struct input *inputs = calloc((size_t)argc, sizeof *inputs); /* at most one per argument */
    if (!inputs)
        return cli_fail(3, "tokenize: out of memory for the inputs");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(TOKENIZE_USAGE, stdout);
            goto done;
        } else if (!strcmp(argv[i], "--text")) {
            if (cli_value(argc, argv, &i, &inputs[n_inputs++].text)) {
                rc = 2;
                goto done;
            }
        } else if (!strcmp(argv[i], "--text-file")) {
            if (cli_value(argc, argv, &i, &inputs[n_inputs++].path)) {
                rc = 2;
                goto done;
            }
        } else if (!strcmp(argv[i], "--ids") || !strcmp(argv[i], "--json")) {
            int f = argv[i][2] == 'i' ? 'i' : 'j';
            if (form != 'r' && form != f) {
                fputs(TOKENIZE_USAGE, stderr);
                rc = cli_fail(2, "tokenize: --ids and --json exclude each other (--json has the "
                                 "ids)");
                goto done;
            }
            form = f;
        } else if (!strcmp(argv[i], "--no-special")) {
            no_special = 1;
        } else if (argv[i][0] == '-' || model) {
            fputs(TOKENIZE_USAGE, stderr);
            rc = cli_fail(2, "tokenize: unexpected argument '%s'", argv[i]);
            goto done;
        } else {
            model = argv[i];
        }
    }
    if (!model || n_inputs == 0) {
        fputs(TOKENIZE_USAGE, stderr);
        rc = cli_fail(2, "tokenize: need MODEL.gguf and --text or --text-file");
        goto done;
    }
    struct gate_err err = {0};
    struct tok *t = NULL;
    int st = cmd_tokenize_load(&t, model, &err);
    for (int k = 0; k < n_inputs && !st; k++)
        st = tokenize_one(t, &inputs[k], n_inputs, !no_special, form, &err);
    tok_free(t);
    if (st)
        rc = cli_fail(err_exit_code(st), "tokenize: %s", err.msg);
    else
        rc = finish_stdout("tokenize");
done:
    free(inputs);
    return rc;
}

/* ---- gate detokenize ------------------------------------------------------------------------ */

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *ids_arg = NULL, *ids_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(DETOKENIZE_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--ids")) {
            if (cli_value(argc, argv, &i, &ids_arg))
                return 2;
        } else if (!strcmp(argv[i], "--ids-file")) {
            if (cli_value(argc, argv, &i, &ids_file))
                return 2;
        } else if (argv[i][0] == '-' || model) {
            fputs(DETOKENIZE_USAGE, stderr);
            return cli_fail(2, "detokenize: unexpected argument '%s'", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model || (!ids_arg == !ids_file)) {
        fputs(DETOKENIZE_USAGE, stderr);
        return cli_fail(2, "detokenize: need MODEL.gguf and exactly one of --ids, --ids-file");
    }
    struct gate_err err = {0};
    struct tok *t = NULL;
    char *buf = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    int32_t *ids = NULL;
    int n = 0;
    int rc = cmd_tokenize_load(&t, model, &err);
    if (!rc && ids_file)
        rc = read_all(ids_file, &buf, &len, &err);
    if (!rc)
        rc = tok_parse_ids(ids_arg ? ids_arg : buf, ids_arg ? strlen(ids_arg) : len,
                           ids_arg ? "--ids" : ids_file, (uint32_t)tok_n_vocab(t), &ids, &n, &err);
    if (!rc)
        rc = tok_decode(t, ids, n, &out, &out_len, &err);
    if (!rc && out_len)
        fwrite(out, 1, out_len, stdout);
    free(out);
    free(ids);
    free(buf);
    tok_free(t);
    if (rc)
        return cli_fail(err_exit_code(rc), "detokenize: %s", err.msg);
    return finish_stdout("detokenize");
}
