/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 for the gpu-widgets tests.
 *
 * The real NVML can only be exercised on a machine with an NVIDIA driver, and
 * even there a test cannot make a GPU fall off the bus on demand.  This library
 * exports the subset of NVML that gpu-widgets uses, with the same C signatures
 * and struct layouts as the official pynvml ctypes bindings expect, and answers
 * every call from a plain-text config file named by $FAKE_NVML_CONFIG.  The
 * file is re-read whenever it changes, so a test can alter what "the driver"
 * reports while a process is running.  See README.md for the config format.
 *
 * Build:  gcc -shared -fPIC -O2 -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 * Leave a symbol out (to mimic an older driver):  -DFAKE_NVML_OMIT_<function>
 */
#define _GNU_SOURCE /* getline, st_mtim/st_ctim, nanosleep */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

/* Exported even if somebody builds with -fvisibility=hidden. */
#define FAKE_EXPORT __attribute__((visibility("default")))
/* Helpers whose only callers may all be omitted with -DFAKE_NVML_OMIT_...;
 * without this, such builds would warn about unused static functions. */
#define FAKE_MAYBE_UNUSED __attribute__((unused))

/* ------------------------------------------------------------------------ */
/* The slice of the NVML ABI that we implement.                              */
/* ------------------------------------------------------------------------ */

/* nvmlReturn_t and the other NVML enums are C enums in nvml.h; on the
 * platforms we target an enum is passed exactly like an int, which is also
 * what pynvml's ctypes declarations (c_uint) assume. */
typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

/* Opaque to callers; handles are addresses inside g_devices (see below). */
struct fake_device {
    unsigned int reserved;
};
typedef struct fake_device *nvmlDevice_t;

/* Layouts mirror pynvml's c_nvmlMemory_t, c_nvmlMemory_v2_t,
 * c_nvmlUtilization_t and c_nvmlProcessInfo_v2_t/_v3_t. */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* pynvml's nvmlPciInfo_t (the _v3 layout): bus ids as text, then their parts. */
typedef struct {
    char busIdLegacy[16]; /* "0000:18:00.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[32]; /* "00000000:18:00.0", as nvidia-smi prints it */
} nvmlPciInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* NVML versions its newer structs as sizeof(struct) | (version << 24). */
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(nvmlMemory_v2 == 0x02000028, "pynvml passes nvmlMemory_v2 = 0x02000028");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_v2_t layout");

/* Per-process utilization: pynvml's c_nvmlProcessUtilizationSample_t (the
 * older call) and c_nvmlProcessUtilizationInfo_v1_t / c_nvmlProcessesUtilizationInfo_v1_t. */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
    unsigned int jpgUtil;
    unsigned int ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version;
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_t;
#define nvmlProcessesUtilizationInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlProcessesUtilizationInfo_t), 1)

_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t layout");
_Static_assert(sizeof(nvmlProcessUtilizationInfo_v1_t) == 40, "nvmlProcessUtilizationInfo_v1_t layout");
_Static_assert(nvmlProcessesUtilizationInfo_v1 == 0x01000018, "pynvml passes ProcessesUtilizationInfo_v1");

/* GPM: an opaque sample handle, the support query and the metrics request
 * (pynvml's c_nvmlGpmSupport_t, c_nvmlGpmMetric_t, c_nvmlGpmMetricsGet_t;
 * the request's array is as long as the caller's NVML_GPM_METRIC_MAX). */
struct fake_gpm_sample;
typedef struct fake_gpm_sample *nvmlGpmSample_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    const char *shortName;
    const char *longName;
    const char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[];
} nvmlGpmMetricsGet_t;

_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");
_Static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24, "nvmlGpmMetricsGet_t layout");

/* ------------------------------------------------------------------------ */
/* Function table: one id per exported NVML function.  Used to key injected  */
/* errors, delays and call counters by function name.                        */
/* ------------------------------------------------------------------------ */

#define FAKE_NVML_FUNCTIONS(X)                    \
    X(nvmlInitWithFlags)                          \
    X(nvmlInit_v2)                                \
    X(nvmlShutdown)                               \
    X(nvmlErrorString)                            \
    X(nvmlSystemGetDriverVersion)                 \
    X(nvmlSystemGetNVMLVersion)                   \
    X(nvmlSystemGetCudaDriverVersion)             \
    X(nvmlSystemGetCudaDriverVersion_v2)          \
    X(nvmlDeviceGetCount_v2)                      \
    X(nvmlDeviceGetHandleByIndex_v2)              \
    X(nvmlDeviceGetIndex)                         \
    X(nvmlDeviceGetName)                          \
    X(nvmlDeviceGetUUID)                          \
    X(nvmlDeviceGetPciInfo_v3)                    \
    X(nvmlDeviceGetPciInfo)                       \
    X(nvmlDeviceGetMemoryInfo)                    \
    X(nvmlDeviceGetMemoryInfo_v2)                 \
    X(nvmlDeviceGetUtilizationRates)              \
    X(nvmlDeviceGetTemperature)                   \
    X(nvmlDeviceGetTemperatureThreshold)          \
    X(nvmlDeviceGetFanSpeed)                      \
    X(nvmlDeviceGetPowerUsage)                    \
    X(nvmlDeviceGetEnforcedPowerLimit)            \
    X(nvmlDeviceGetPowerManagementLimit)          \
    X(nvmlDeviceGetPowerManagementDefaultLimit)   \
    X(nvmlDeviceGetTotalEnergyConsumption)        \
    X(nvmlDeviceGetClockInfo)                     \
    X(nvmlDeviceGetMaxClockInfo)                  \
    X(nvmlDeviceGetPerformanceState)              \
    X(nvmlDeviceGetCurrentClocksEventReasons)     \
    X(nvmlDeviceGetCurrentClocksThrottleReasons)  \
    X(nvmlDeviceGetPcieThroughput)                \
    X(nvmlDeviceGetComputeRunningProcesses_v3)    \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)   \
    X(nvmlDeviceGetComputeRunningProcesses_v2)    \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2)   \
    X(nvmlDeviceGetNumGpuCores)                   \
    X(nvmlDeviceGetMinorNumber)                   \
    X(nvmlDeviceGetMemoryBusWidth)                \
    X(nvmlDeviceGetMaxPcieLinkGeneration)         \
    X(nvmlDeviceGetMaxPcieLinkWidth)              \
    X(nvmlDeviceGetCudaComputeCapability)         \
    X(nvmlDeviceGetMigMode)                       \
    X(nvmlDeviceGetMaxMigDeviceCount)             \
    X(nvmlDeviceGetMigDeviceHandleByIndex)        \
    X(nvmlDeviceGetGpuInstanceId)                 \
    X(nvmlDeviceGetComputeInstanceId)             \
    X(nvmlDeviceGetProcessesUtilizationInfo)      \
    X(nvmlDeviceGetProcessUtilization)            \
    X(nvmlGpmQueryDeviceSupport)                  \
    X(nvmlGpmSampleAlloc)                         \
    X(nvmlGpmSampleFree)                          \
    X(nvmlGpmSampleGet)                           \
    X(nvmlGpmMigSampleGet)                        \
    X(nvmlGpmMetricsGet)

enum fn_id {
#define FAKE_ENUM_ENTRY(name) FN_##name,
    FAKE_NVML_FUNCTIONS(FAKE_ENUM_ENTRY)
#undef FAKE_ENUM_ENTRY
    FN_COUNT
};

static const char *const fn_names[FN_COUNT] = {
#define FAKE_NAME_ENTRY(name) #name,
    FAKE_NVML_FUNCTIONS(FAKE_NAME_ENTRY)
#undef FAKE_NAME_ENTRY
};

static int fn_lookup(const char *name)
{
    for (int i = 0; i < FN_COUNT; i++) {
        if (strcmp(fn_names[i], name) == 0)
            return i;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Configuration model.                                                      */
/* ------------------------------------------------------------------------ */

#define FAKE_MAX_GPUS 32
#define FAKE_MAX_PROCS 128
#define FAKE_MAX_ROWS 16 /* rows of a number-table field (proc_util, mig_devices, ...) */
#define FAKE_ROW_WIDTH 8
#define FAKE_MAX_MIG 7   /* MIG devices per GPU, as on an H100 */
#define FAKE_GPM_METRIC_MAX 477 /* pynvml 13's NVML_GPM_METRIC_MAX */
#define FAKE_STR_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE / ..._UUID_V2_... */
#define CONFIG_ENV "FAKE_NVML_CONFIG"

/* An injected return code; `set` distinguishes "0 = force success" from
 * "not configured", which matters for overriding gpu.<i>.error.*. */
struct err_slot {
    bool set;
    int code;
};

struct proc_list {
    unsigned int count;
    nvmlProcessInfo_t entries[FAKE_MAX_PROCS];
};

struct opt_u64 {
    bool set;
    unsigned long long value;
};

/* "a:b:c,a:b:c": rows of 2..max numbers; numbers a row leaves out read 0. */
struct rows {
    unsigned int count;
    unsigned long long v[FAKE_MAX_ROWS][FAKE_ROW_WIDTH];
};

struct gpu_cfg {
    char name[FAKE_STR_LEN];
    char uuid[FAKE_STR_LEN];
    char pci_bus_id[FAKE_STR_LEN];
    unsigned long long memory_total;
    unsigned long long memory_used;
    struct opt_u64 memory_free; /* unset: total - used - reserved */
    unsigned long long memory_reserved;
    unsigned long long util_gpu;
    unsigned long long util_memory;
    unsigned long long temperature;
    unsigned long long temperature_slowdown;
    unsigned long long fan;
    unsigned long long power_mw;
    unsigned long long power_limit_mw;
    unsigned long long power_default_limit_mw;
    unsigned long long energy_mj;
    unsigned long long clock_graphics;
    unsigned long long clock_sm;
    unsigned long long clock_mem;
    unsigned long long max_clock_sm;
    unsigned long long max_clock_mem;
    unsigned long long pstate;
    unsigned long long clocks_event_reasons;
    unsigned long long pcie_tx_kbps;
    unsigned long long pcie_rx_kbps;
    unsigned long long num_cores;
    unsigned long long minor;
    unsigned long long bus_width;
    unsigned long long pcie_max_gen;
    unsigned long long pcie_max_width;
    unsigned long long cc_major;
    unsigned long long cc_minor;
    unsigned long long mig_current;
    unsigned long long mig_pending;
    struct proc_list procs;
    struct proc_list graphics_procs;
    unsigned long long gpm_supported;     /* nvmlGpmQueryDeviceSupport */
    unsigned long long gpm_mig_supported; /* nvmlGpmMigSampleGet */
    unsigned long long gpm_sm_util;       /* percent, per GPM metric */
    unsigned long long gpm_sm_occupancy;
    unsigned long long gpm_tensor_util;
    unsigned long long gpm_dram_util;
    struct rows gpm_metric_errors; /* metricId:code */
    struct rows proc_util;         /* pid:sm:mem */
    struct rows mig_devices;       /* gi:ci:used:total[:sm:occupancy:tensor:dram] */
    struct err_slot err[FN_COUNT]; /* gpu.<i>.error.<function> */
    struct err_slot err_all;       /* gpu.<i>.error.* */
    struct opt_u64 delay_ms[FN_COUNT]; /* gpu.<i>.delay_ms.<function> */
};

struct config {
    unsigned long long init_error;
    char driver_version[FAKE_STR_LEN];
    char nvml_version[FAKE_STR_LEN];
    unsigned long long cuda_driver_version;
    unsigned long long device_count;
    struct err_slot err[FN_COUNT];     /* error.<function> */
    unsigned long long delay_ms[FN_COUNT]; /* delay_ms.<function> */
    struct gpu_cfg gpus[FAKE_MAX_GPUS];
};

enum field_kind { F_STR, F_U64, F_OPT_U64, F_PROCS, F_ROWS };

struct field {
    const char *name;
    enum field_kind kind;
    size_t offset;
    unsigned long long max; /* F_U64/F_OPT_U64: largest value the C type holds */
};

#define UINT_FIELD(s, f) { #f, F_U64, offsetof(struct s, f), UINT_MAX }
#define INT_FIELD(s, f) { #f, F_U64, offsetof(struct s, f), INT_MAX }
#define ULL_FIELD(s, f) { #f, F_U64, offsetof(struct s, f), ULLONG_MAX }

static const struct field global_fields[] = {
    INT_FIELD(config, init_error),
    { "driver_version", F_STR, offsetof(struct config, driver_version), 0 },
    { "nvml_version", F_STR, offsetof(struct config, nvml_version), 0 },
    INT_FIELD(config, cuda_driver_version),
    { "device_count", F_U64, offsetof(struct config, device_count), FAKE_MAX_GPUS },
};

static const struct field gpu_fields[] = {
    { "name", F_STR, offsetof(struct gpu_cfg, name), 0 },
    { "uuid", F_STR, offsetof(struct gpu_cfg, uuid), 0 },
    { "pci_bus_id", F_STR, offsetof(struct gpu_cfg, pci_bus_id), 0 },
    ULL_FIELD(gpu_cfg, memory_total),
    ULL_FIELD(gpu_cfg, memory_used),
    { "memory_free", F_OPT_U64, offsetof(struct gpu_cfg, memory_free), ULLONG_MAX },
    ULL_FIELD(gpu_cfg, memory_reserved),
    UINT_FIELD(gpu_cfg, util_gpu),
    UINT_FIELD(gpu_cfg, util_memory),
    UINT_FIELD(gpu_cfg, temperature),
    UINT_FIELD(gpu_cfg, temperature_slowdown),
    UINT_FIELD(gpu_cfg, fan),
    UINT_FIELD(gpu_cfg, power_mw),
    UINT_FIELD(gpu_cfg, power_limit_mw),
    UINT_FIELD(gpu_cfg, power_default_limit_mw),
    ULL_FIELD(gpu_cfg, energy_mj),
    UINT_FIELD(gpu_cfg, clock_graphics),
    UINT_FIELD(gpu_cfg, clock_sm),
    UINT_FIELD(gpu_cfg, clock_mem),
    UINT_FIELD(gpu_cfg, max_clock_sm),
    UINT_FIELD(gpu_cfg, max_clock_mem),
    { "pstate", F_U64, offsetof(struct gpu_cfg, pstate), 32 }, /* 32 = NVML_PSTATE_UNKNOWN */
    ULL_FIELD(gpu_cfg, clocks_event_reasons),
    UINT_FIELD(gpu_cfg, pcie_tx_kbps),
    UINT_FIELD(gpu_cfg, pcie_rx_kbps),
    UINT_FIELD(gpu_cfg, num_cores),
    UINT_FIELD(gpu_cfg, minor),
    UINT_FIELD(gpu_cfg, bus_width),
    UINT_FIELD(gpu_cfg, pcie_max_gen),
    UINT_FIELD(gpu_cfg, pcie_max_width),
    INT_FIELD(gpu_cfg, cc_major),
    INT_FIELD(gpu_cfg, cc_minor),
    UINT_FIELD(gpu_cfg, mig_current),
    UINT_FIELD(gpu_cfg, mig_pending),
    { "procs", F_PROCS, offsetof(struct gpu_cfg, procs), 0 },
    { "graphics_procs", F_PROCS, offsetof(struct gpu_cfg, graphics_procs), 0 },
    UINT_FIELD(gpu_cfg, gpm_supported),
    UINT_FIELD(gpu_cfg, gpm_mig_supported),
    { "gpm_sm_util", F_U64, offsetof(struct gpu_cfg, gpm_sm_util), 100 },
    { "gpm_sm_occupancy", F_U64, offsetof(struct gpu_cfg, gpm_sm_occupancy), 100 },
    { "gpm_tensor_util", F_U64, offsetof(struct gpu_cfg, gpm_tensor_util), 100 },
    { "gpm_dram_util", F_U64, offsetof(struct gpu_cfg, gpm_dram_util), 100 },
    { "gpm_metric_errors", F_ROWS, offsetof(struct gpu_cfg, gpm_metric_errors), 2 },
    { "proc_util", F_ROWS, offsetof(struct gpu_cfg, proc_util), 3 },
    { "mig_devices", F_ROWS, offsetof(struct gpu_cfg, mig_devices), 8 },
};

/* Defaults describe an idle H100 SXM so that a config holding only
 * `device_count = N` already yields plausible GPUs. */
static void gpu_set_defaults(struct gpu_cfg *g, unsigned int index)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
    /* Unique per index, same shape as a real UUID. */
    snprintf(g->uuid, sizeof(g->uuid), "GPU-00000000-0000-0000-0000-%012x", index);
    /* One bus per GPU, as on a DGX: 0x18, 0x2a, 0x3c, ... */
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "00000000:%02X:00.0", (0x18u + 0x12u * index) & 0xffu);
    g->memory_total = 85520809984ULL; /* 81559 MiB, what an H100 80GB reports */
    g->memory_used = 0;
    g->memory_reserved = 0;
    g->util_gpu = 0;
    g->util_memory = 0;
    g->temperature = 35;
    g->temperature_slowdown = 87;
    g->fan = 30;
    g->power_mw = 70000;
    g->power_limit_mw = 700000;
    g->power_default_limit_mw = 700000;
    g->energy_mj = 1000000;
    g->clock_graphics = 345;
    g->clock_sm = 345;
    g->clock_mem = 2619;
    g->max_clock_sm = 1980;
    g->max_clock_mem = 2619;
    g->pstate = 0;
    g->clocks_event_reasons = 0x1; /* nvmlClocksEventReasonGpuIdle */
    g->pcie_tx_kbps = 0;
    g->pcie_rx_kbps = 0;
    g->num_cores = 16896; /* 132 SMs x 128 */
    g->minor = index; /* /dev/nvidia<index>, as the driver numbers them in order */
    g->bus_width = 5120;
    g->pcie_max_gen = 5;
    g->pcie_max_width = 16;
    g->cc_major = 9;
    g->cc_minor = 0;
    g->mig_current = 0;
    g->mig_pending = 0;
    g->gpm_supported = 1; /* an H100 has GPM */
    g->gpm_mig_supported = 1;
}

static void config_set_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->driver_version, sizeof(c->driver_version), "580.65.06");
    snprintf(c->nvml_version, sizeof(c->nvml_version), "13.580.65.06");
    c->cuda_driver_version = 13000;
    c->device_count = 0;
    for (unsigned int i = 0; i < FAKE_MAX_GPUS; i++)
        gpu_set_defaults(&c->gpus[i], i);
}

/* ------------------------------------------------------------------------ */
/* Config parsing.                                                           */
/* ------------------------------------------------------------------------ */

static void warn(const char *path, unsigned int line, const char *what, const char *text)
{
    /* Typos in a test config should be visible, but must not abort the
     * process under test, so we only report them. */
    fprintf(stderr, "fake_nvml: %s:%u: %s: %s\n", path, line, what, text);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Decimal or 0x-hex, nothing else: strtoull alone would also accept signs,
 * leading blanks and octal, which would silently misread a config. */
static bool parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    if (*s == '\0')
        return false;
    for (const char *p = s; *p; p++) {
        bool digit = *p >= '0' && *p <= '9';
        bool hex = (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F');
        if (!digit && !(base == 16 && hex))
            return false;
    }
    errno = 0;
    unsigned long long v = strtoull(s, NULL, base);
    if (errno != 0 || v > max) /* ERANGE: does not fit 64 bits */
        return false;
    *out = v;
    return true;
}

/* "pid:bytes[:gpuInstanceId:computeInstanceId],..."; empty means none. */
static bool parse_procs(char *s, struct proc_list *out)
{
    struct proc_list list;
    list.count = 0;
    char *save = NULL;
    for (char *item = strtok_r(s, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        item = trim(item);
        if (*item == '\0')
            continue;
        char *parts[4];
        unsigned int nparts = 0;
        char *psave = NULL;
        for (char *p = strtok_r(item, ":", &psave); p; p = strtok_r(NULL, ":", &psave)) {
            if (nparts == 4)
                return false;
            parts[nparts++] = trim(p);
        }
        if (nparts != 2 && nparts != 4)
            return false;
        if (list.count == FAKE_MAX_PROCS)
            return false;
        unsigned long long pid, mem, gi = UINT_MAX, ci = UINT_MAX; /* UINT_MAX: not a MIG instance */
        if (!parse_u64(parts[0], UINT_MAX, &pid) || !parse_u64(parts[1], ULLONG_MAX, &mem))
            return false;
        if (nparts == 4 && (!parse_u64(parts[2], UINT_MAX, &gi) || !parse_u64(parts[3], UINT_MAX, &ci)))
            return false;
        nvmlProcessInfo_t *e = &list.entries[list.count++];
        e->pid = (unsigned int)pid;
        e->usedGpuMemory = mem;
        e->gpuInstanceId = (unsigned int)gi;
        e->computeInstanceId = (unsigned int)ci;
    }
    *out = list;
    return true;
}

/* Rows of 2..width numbers separated by ':', rows by ','; empty means none. */
static bool parse_rows(char *s, struct rows *out, unsigned int width)
{
    struct rows rows;
    memset(&rows, 0, sizeof(rows));
    char *save = NULL;
    for (char *item = strtok_r(s, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        item = trim(item);
        if (*item == '\0')
            continue;
        if (rows.count == FAKE_MAX_ROWS)
            return false;
        unsigned int n = 0;
        char *psave = NULL;
        for (char *p = strtok_r(item, ":", &psave); p; p = strtok_r(NULL, ":", &psave)) {
            if (n == width || !parse_u64(trim(p), ULLONG_MAX, &rows.v[rows.count][n]))
                return false;
            n++;
        }
        if (n < 2)
            return false;
        rows.count++;
    }
    *out = rows;
    return true;
}

/* Copies `src` with each `\xNN` turned into that byte, so a config can give a
 * name that is not valid UTF-8; false if too long or if it would embed a NUL. */
static bool unescape_str(char *dst, const char *src)
{
    char buf[FAKE_STR_LEN]; /* a bad value leaves the field as it was */
    size_t n = 0;
    for (const char *p = src; *p; n++) {
        if (n + 1 >= FAKE_STR_LEN)
            return false;
        if (p[0] == '\\' && p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) {
            char hex[3] = { p[2], p[3], '\0' };
            unsigned long byte = strtoul(hex, NULL, 16);
            if (byte == 0)
                return false;
            buf[n] = (char)byte;
            p += 4;
        } else {
            buf[n] = *p++;
        }
    }
    buf[n] = '\0';
    memcpy(dst, buf, n + 1);
    return true;
}

/* Returns false if `key` names a field of `fields` but `value` is bad;
 * unknown keys are ignored (true) so configs stay forward compatible. */
static bool set_field(void *base, const struct field *fields, size_t nfields, const char *key, char *value)
{
    for (size_t i = 0; i < nfields; i++) {
        const struct field *f = &fields[i];
        if (strcmp(f->name, key) != 0)
            continue;
        char *dst = (char *)base + f->offset;
        switch (f->kind) {
        case F_STR:
            return unescape_str(dst, value);
        case F_U64:
            return parse_u64(value, f->max, (unsigned long long *)(void *)dst);
        case F_OPT_U64: {
            struct opt_u64 *o = (struct opt_u64 *)(void *)dst;
            if (!parse_u64(value, f->max, &o->value))
                return false;
            o->set = true;
            return true;
        }
        case F_PROCS:
            return parse_procs(value, (struct proc_list *)(void *)dst);
        case F_ROWS:
            return parse_rows(value, (struct rows *)(void *)dst, (unsigned int)f->max);
        }
    }
    return true;
}

static bool set_error(struct err_slot *slot, const char *value)
{
    unsigned long long code;
    if (!parse_u64(value, INT_MAX, &code))
        return false;
    slot->set = true;
    slot->code = (int)code;
    return true;
}

/* One `key = value` line.  Returns false (and the caller warns) for a
 * malformed value of a known key. */
static bool apply_line(struct config *c, const char *key, char *value)
{
    if (strncmp(key, "error.", 6) == 0) {
        int fn = fn_lookup(key + 6);
        return fn < 0 || set_error(&c->err[fn], value);
    }
    if (strncmp(key, "delay_ms.", 9) == 0) {
        int fn = fn_lookup(key + 9);
        return fn < 0 || parse_u64(value, 3600000, &c->delay_ms[fn]);
    }
    if (strncmp(key, "gpu.", 4) == 0) {
        const char *p = key + 4;
        if (*p < '0' || *p > '9')
            return true;
        char *end = NULL;
        unsigned long idx = strtoul(p, &end, 10);
        if (*end != '.')
            return true;
        if (idx >= FAKE_MAX_GPUS)
            return false;
        struct gpu_cfg *g = &c->gpus[idx];
        const char *field = end + 1;
        if (strncmp(field, "error.", 6) == 0) {
            const char *fname = field + 6;
            if (strcmp(fname, "*") == 0)
                return set_error(&g->err_all, value);
            int fn = fn_lookup(fname);
            return fn < 0 || set_error(&g->err[fn], value);
        }
        if (strncmp(field, "delay_ms.", 9) == 0) {
            int fn = fn_lookup(field + 9);
            if (fn < 0)
                return true;
            g->delay_ms[fn].set = parse_u64(value, 3600000, &g->delay_ms[fn].value);
            return g->delay_ms[fn].set;
        }
        return set_field(g, gpu_fields, sizeof(gpu_fields) / sizeof(gpu_fields[0]), field, value);
    }
    return set_field(c, global_fields, sizeof(global_fields) / sizeof(global_fields[0]), key, value);
}

static void parse_config_stream(FILE *f, const char *path, struct config *c)
{
    config_set_defaults(c);
    char *line = NULL;
    size_t cap = 0;
    unsigned int lineno = 0;
    while (getline(&line, &cap, f) != -1) {
        lineno++;
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            warn(path, lineno, "expected `key = value`", s);
            continue;
        }
        *eq = '\0';
        char *key = trim(s);
        char *value = trim(eq + 1);
        if (!apply_line(c, key, value))
            warn(path, lineno, "bad value ignored for key", key);
    }
    free(line);
}

/* ------------------------------------------------------------------------ */
/* Global state.  Everything below is guarded by g_lock except the call      */
/* counters, which are atomics so fakeNvmlCallCount never blocks.            */
/* ------------------------------------------------------------------------ */

/* Identity of the parsed file: a rewrite changes mtime/ctime/size, and an
 * os.replace() also changes the inode. */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    struct timespec ctime;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* Double buffer: a new file is parsed into the inactive one, so the active
 * config is never half-written (and parsing needs no large stack frame). */
static struct config g_configs[2];
static struct config *g_cfg;    /* active config; NULL until first use */
static bool g_cfg_loaded;       /* g_cfg came from a file (vs. defaults) */
static char *g_cfg_path;        /* path g_cfg was read from */
static struct file_id g_cfg_id; /* identity of that file when read */
static unsigned int g_init_refcount;
static atomic_ullong g_calls[FN_COUNT];
/* Handles are addresses of these elements; only the address matters. */
static struct fake_device g_devices[FAKE_MAX_GPUS];
/* MIG device handles: slot j of GPU i is g_mig_devices[i][j]. */
static struct fake_device g_mig_devices[FAKE_MAX_GPUS][FAKE_MAX_MIG];

static struct file_id file_id_of(const struct stat *st)
{
    struct file_id id;
    memset(&id, 0, sizeof(id));
    id.dev = st->st_dev;
    id.ino = st->st_ino;
    id.size = st->st_size;
    id.mtime = st->st_mtim;
    id.ctime = st->st_ctim;
    return id;
}

static bool same_file_id(const struct file_id *a, const struct file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/*
 * Called with g_lock held at the start of every call.  Re-reads the config
 * when $FAKE_NVML_CONFIG names a different file or the file changed.
 * Returns whether a config file is readable right now.  When it is not, the
 * last good config (or the built-in defaults) stays active, so a process that
 * already initialised keeps running; only nvmlInit* reports the failure.
 */
static bool refresh_config_locked(void)
{
    if (!g_cfg) {
        config_set_defaults(&g_configs[0]);
        g_cfg = &g_configs[0];
    }
    /* getenv on every call because tests change the variable at run time. */
    const char *path = getenv(CONFIG_ENV);
    if (!path || !*path)
        return false;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    struct file_id id = file_id_of(&st);
    if (g_cfg_loaded && strcmp(path, g_cfg_path) == 0 && same_file_id(&id, &g_cfg_id))
        return true;

    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    /* Record the identity of what we actually read: if the file was replaced
     * between stat() and fopen(), the next call notices and re-reads. */
    struct stat fst;
    if (fstat(fileno(f), &fst) != 0) {
        fclose(f);
        return false;
    }
    char *path_copy = strdup(path);
    if (!path_copy) {
        fclose(f);
        return false;
    }
    struct config *next = (g_cfg == &g_configs[0]) ? &g_configs[1] : &g_configs[0];
    parse_config_stream(f, path, next);
    fclose(f);
    free(g_cfg_path);
    g_cfg_path = path_copy;
    g_cfg_id = file_id_of(&fst);
    g_cfg = next;
    g_cfg_loaded = true;
    return true;
}

/* Maps a handle back to its index, or -1 for anything we did not hand out.
 * Integer arithmetic because comparing unrelated pointers is undefined. */
static int decode_handle(nvmlDevice_t device)
{
    uintptr_t p = (uintptr_t)device;
    uintptr_t base = (uintptr_t)&g_devices[0];
    if (p < base || p >= base + sizeof(g_devices) || (p - base) % sizeof(g_devices[0]) != 0)
        return -1;
    return (int)((p - base) / sizeof(g_devices[0]));
}

/* A MIG handle's GPU and slot (true), or false for anything else. */
static bool decode_mig_handle(nvmlDevice_t device, int *gpu, int *slot)
{
    uintptr_t p = (uintptr_t)device;
    uintptr_t base = (uintptr_t)&g_mig_devices[0][0];
    if (p < base || p >= base + sizeof(g_mig_devices) || (p - base) % sizeof(g_mig_devices[0][0]) != 0)
        return false;
    size_t k = (p - base) / sizeof(g_mig_devices[0][0]);
    *gpu = (int)(k / FAKE_MAX_MIG);
    *slot = (int)(k % FAKE_MAX_MIG);
    return true;
}

/* Most specific wins: gpu.<i>.error.<fn>, then gpu.<i>.error.*, then the
 * all-devices error.<fn>. */
static int device_error_locked(unsigned int index, enum fn_id fn)
{
    const struct gpu_cfg *g = &g_cfg->gpus[index];
    if (g->err[fn].set)
        return g->err[fn].code;
    if (g->err_all.set)
        return g->err_all.code;
    if (g_cfg->err[fn].set)
        return g_cfg->err[fn].code;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Call prologue/epilogue.                                                   */
/* ------------------------------------------------------------------------ */

struct call {
    nvmlReturn_t ret;
    unsigned long long delay_ms;
    enum fn_id fn;
    int gpu; /* the device's index for device functions, else -1 */
};

/* The delay that applies to `fn` (on `gpu`, or -1) in the current config. */
static unsigned long long delay_locked(enum fn_id fn, int gpu)
{
    if (gpu >= 0 && g_cfg->gpus[gpu].delay_ms[fn].set)
        return g_cfg->gpus[gpu].delay_ms[fn].value;
    return g_cfg->delay_ms[fn];
}

static void count_call(enum fn_id fn)
{
    atomic_fetch_add_explicit(&g_calls[fn], 1, memory_order_relaxed);
}

/* Counts the call, takes g_lock (held until call_end), refreshes the config
 * and checks that NVML is initialised.  Returns whether to go on. */
static bool call_begin(struct call *c, enum fn_id fn)
{
    count_call(fn);
    pthread_mutex_lock(&g_lock);
    refresh_config_locked();
    c->ret = NVML_SUCCESS;
    c->fn = fn;
    c->gpu = -1;
    c->delay_ms = g_cfg->delay_ms[fn];
    if (g_init_refcount == 0) {
        c->ret = NVML_ERROR_UNINITIALIZED;
        return false;
    }
    return true;
}

/* call_begin plus the system-wide error.<fn> injection. */
static FAKE_MAYBE_UNUSED bool sys_begin(struct call *c, enum fn_id fn)
{
    if (!call_begin(c, fn))
        return false;
    if (g_cfg->err[fn].set && g_cfg->err[fn].code != NVML_SUCCESS) {
        c->ret = g_cfg->err[fn].code;
        return false;
    }
    return true;
}

/* call_begin plus handle validation and per-device error injection.
 * Returns the device's config (valid until call_end) or NULL. */
static FAKE_MAYBE_UNUSED const struct gpu_cfg *dev_begin(struct call *c, enum fn_id fn, nvmlDevice_t device)
{
    if (!call_begin(c, fn))
        return NULL;
    int idx = decode_handle(device);
    /* A handle beyond a since-lowered device_count is stale: reject it. */
    if (idx < 0 || (unsigned long long)idx >= g_cfg->device_count) {
        c->ret = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    c->gpu = idx;
    c->delay_ms = delay_locked(fn, idx);
    int err = device_error_locked((unsigned int)idx, fn);
    if (err != NVML_SUCCESS) {
        c->ret = err;
        return NULL;
    }
    return &g_cfg->gpus[idx];
}

static unsigned long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
}

/* Drops g_lock, then sleeps for delay_ms.<fn>: sleeping outside the lock lets
 * other threads' calls proceed, as they would with the real driver.  Sleeps in
 * slices of at most 50 ms and looks at the config between them, so a rewrite
 * that lowers the delay ends a call already sleeping: a test can hang a call
 * (delay 3600000) and later let it return. */
static nvmlReturn_t call_end(struct call *c)
{
    pthread_mutex_unlock(&g_lock);
    unsigned long long start = now_ms(), wanted = c->delay_ms;
    for (;;) {
        unsigned long long elapsed = now_ms() - start;
        if (elapsed >= wanted)
            break;
        unsigned long long step = wanted - elapsed < 50 ? wanted - elapsed : 50;
        struct timespec ts = { (time_t)0, (long)step * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&g_lock);
        refresh_config_locked();
        unsigned long long now_wanted = delay_locked(c->fn, c->gpu);
        pthread_mutex_unlock(&g_lock);
        if (now_wanted < wanted)
            wanted = now_wanted;
    }
    return c->ret;
}

/* Helpers shared by the exported functions. */

static FAKE_MAYBE_UNUSED nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

static FAKE_MAYBE_UNUSED unsigned long long gpu_u64(const struct gpu_cfg *g, size_t offset)
{
    return *(const unsigned long long *)(const void *)((const char *)g + offset);
}

/* Body of every "one unsigned int out-parameter" device getter. */
static FAKE_MAYBE_UNUSED nvmlReturn_t get_uint(enum fn_id fn, nvmlDevice_t device, unsigned int *out, size_t offset)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, fn, device);
    if (g) {
        if (!out)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *out = (unsigned int)gpu_u64(g, offset);
    }
    return call_end(&c);
}

static FAKE_MAYBE_UNUSED nvmlReturn_t get_ull(enum fn_id fn, nvmlDevice_t device, unsigned long long *out, size_t offset)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, fn, device);
    if (g) {
        if (!out)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *out = gpu_u64(g, offset);
    }
    return call_end(&c);
}

static FAKE_MAYBE_UNUSED unsigned long long memory_free(const struct gpu_cfg *g)
{
    if (g->memory_free.set)
        return g->memory_free.value;
    unsigned long long taken = g->memory_used + g->memory_reserved;
    if (taken < g->memory_used || taken > g->memory_total) /* overflow or overcommit */
        return 0;
    return g->memory_total - taken;
}

/* The two-call protocol of nvmlDevice*RunningProcesses: callers first pass a
 * NULL array to learn the count, then call again with room for it. */
static FAKE_MAYBE_UNUSED nvmlReturn_t get_procs(enum fn_id fn, nvmlDevice_t device, unsigned int *infoCount,
                                                nvmlProcessInfo_t *infos, bool graphics)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, fn, device);
    if (g) {
        const struct proc_list *list = graphics ? &g->graphics_procs : &g->procs;
        if (!infoCount) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (list->count == 0) {
            *infoCount = 0;
        } else if (!infos || *infoCount < list->count) {
            *infoCount = list->count;
            c.ret = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            memcpy(infos, list->entries, list->count * sizeof(infos[0]));
            *infoCount = list->count;
        }
    }
    return call_end(&c);
}

#define GPU_OFFSET(field) offsetof(struct gpu_cfg, field)

/* Like dev_begin for a MIG device handle: the parent GPU's config (its
 * errors apply) and the instance's row, or NULL.  A slot is valid while its
 * GPU is in MIG mode and has that many mig_devices rows. */
static FAKE_MAYBE_UNUSED const struct gpu_cfg *mig_begin(struct call *c, enum fn_id fn, nvmlDevice_t device,
                                                         const unsigned long long **row)
{
    if (!call_begin(c, fn))
        return NULL;
    int gpu, slot;
    if (!decode_mig_handle(device, &gpu, &slot) || (unsigned long long)gpu >= g_cfg->device_count) {
        c->ret = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    const struct gpu_cfg *g = &g_cfg->gpus[gpu];
    if (!g->mig_current || (unsigned int)slot >= g->mig_devices.count) {
        c->ret = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    c->gpu = gpu;
    c->delay_ms = delay_locked(fn, gpu);
    int err = device_error_locked((unsigned int)gpu, fn);
    if (err != NVML_SUCCESS) {
        c->ret = err;
        return NULL;
    }
    *row = g->mig_devices.v[slot];
    return g;
}

static FAKE_MAYBE_UNUSED bool is_mig_handle(nvmlDevice_t device)
{
    int gpu, slot;
    return decode_mig_handle(device, &gpu, &slot);
}

/* Per-process samples since `lastSeen` are all of proc_util, stamped now. */
static FAKE_MAYBE_UNUSED unsigned long long wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

/* ------------------------------------------------------------------------ */
/* Exported NVML API.  Each function sits in its own #ifndef so a build can  */
/* drop it with -DFAKE_NVML_OMIT_<name>, like a driver that predates it.     */
/* ------------------------------------------------------------------------ */

static FAKE_MAYBE_UNUSED nvmlReturn_t do_init(enum fn_id fn)
{
    struct call c;
    count_call(fn);
    pthread_mutex_lock(&g_lock);
    bool have_config = refresh_config_locked();
    c.fn = fn;
    c.gpu = -1;
    c.delay_ms = g_cfg->delay_ms[fn];
    if (!have_config)
        c.ret = NVML_ERROR_DRIVER_NOT_LOADED; /* no config = no driver */
    else if (g_cfg->err[fn].set)
        c.ret = g_cfg->err[fn].code;
    else
        c.ret = (nvmlReturn_t)g_cfg->init_error;
    /* Like the real library, init/shutdown are reference counted. */
    if (c.ret == NVML_SUCCESS)
        g_init_refcount++;
    return call_end(&c);
}

#ifndef FAKE_NVML_OMIT_nvmlInitWithFlags
FAKE_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* no flag changes what a fake driver does */
    return do_init(FN_nvmlInitWithFlags);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlInit_v2
FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(FN_nvmlInit_v2);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlShutdown
FAKE_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlShutdown))
        g_init_refcount--;
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlErrorString
FAKE_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    /* Works without init, like the real one; pynvml calls it to build the
     * message of codes it has no text for. */
    count_call(FN_nvmlErrorString);
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case 23: return "Ran out of critical resources, other than memory";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 30: return "Reset type not supported";
    default: return "Unknown Error";
    }
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetDriverVersion
FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlSystemGetDriverVersion))
        c.ret = copy_string(version, length, g_cfg->driver_version);
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetNVMLVersion
FAKE_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlSystemGetNVMLVersion))
        c.ret = copy_string(version, length, g_cfg->nvml_version);
    return call_end(&c);
}
#endif

static FAKE_MAYBE_UNUSED nvmlReturn_t get_cuda_version(enum fn_id fn, int *cudaDriverVersion)
{
    struct call c;
    if (sys_begin(&c, fn)) {
        if (!cudaDriverVersion)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *cudaDriverVersion = (int)g_cfg->cuda_driver_version;
    }
    return call_end(&c);
}

#ifndef FAKE_NVML_OMIT_nvmlSystemGetCudaDriverVersion
FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return get_cuda_version(FN_nvmlSystemGetCudaDriverVersion, cudaDriverVersion);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetCudaDriverVersion_v2
FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return get_cuda_version(FN_nvmlSystemGetCudaDriverVersion_v2, cudaDriverVersion);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCount_v2
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlDeviceGetCount_v2)) {
        if (!deviceCount)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *deviceCount = (unsigned int)g_cfg->device_count;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetHandleByIndex_v2
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    struct call c;
    if (call_begin(&c, FN_nvmlDeviceGetHandleByIndex_v2)) {
        if (index >= g_cfg->device_count || !device)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if ((c.ret = device_error_locked(index, FN_nvmlDeviceGetHandleByIndex_v2)) == NVML_SUCCESS)
            *device = &g_devices[index];
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetIndex
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct call c;
    if (dev_begin(&c, FN_nvmlDeviceGetIndex, device)) {
        if (!index)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *index = (unsigned int)decode_handle(device);
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetName
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetName, device);
    if (g)
        c.ret = copy_string(name, length, g->name);
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetUUID
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct call c;
    if (is_mig_handle(device)) {
        const unsigned long long *row;
        if (mig_begin(&c, FN_nvmlDeviceGetUUID, device, &row)) {
            char text[FAKE_STR_LEN];
            snprintf(text, sizeof(text), "MIG-00000000-0000-0000-%04x-%012llx", (unsigned int)c.gpu, row[0]);
            c.ret = copy_string(uuid, length, text);
        }
        return call_end(&c);
    }
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetUUID, device);
    if (g)
        c.ret = copy_string(uuid, length, g->uuid);
    return call_end(&c);
}
#endif

static nvmlReturn_t fill_pci_info(const struct gpu_cfg *g, nvmlPciInfo_t *pci)
{
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    /* A bus id the test made unparseable still comes back as text: the parts read 0. */
    if (sscanf(g->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        domain = bus = device = function = 0;
    snprintf(pci->busId, sizeof(pci->busId), "%.31s", g->pci_bus_id);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", domain & 0xffffu, bus & 0xffu,
             device & 0xffu, function & 0xfu);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = 0x233010DEu; /* H100 SXM5, NVIDIA's vendor id */
    pci->pciSubSystemId = 0x16C110DEu;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPciInfo_v3
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetPciInfo_v3, device);
    if (g)
        c.ret = fill_pci_info(g, pci);
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPciInfo
/* The unversioned name older bindings resolve; same layout in this fake. */
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetPciInfo, device);
    if (g)
        c.ret = fill_pci_info(g, pci);
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMemoryInfo
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct call c;
    if (is_mig_handle(device)) {
        const unsigned long long *row;
        if (mig_begin(&c, FN_nvmlDeviceGetMemoryInfo, device, &row)) {
            if (!memory) {
                c.ret = NVML_ERROR_INVALID_ARGUMENT;
            } else {
                memory->total = row[3];
                memory->used = row[2];
                memory->free = row[3] > row[2] ? row[3] - row[2] : 0;
            }
        }
        return call_end(&c);
    }
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMemoryInfo, device);
    if (g) {
        if (!memory) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            memory->total = g->memory_total;
            memory->free = memory_free(g);
            memory->used = g->memory_used;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMemoryInfo_v2
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct call c;
    if (is_mig_handle(device)) {
        const unsigned long long *row;
        if (mig_begin(&c, FN_nvmlDeviceGetMemoryInfo_v2, device, &row)) {
            if (!memory) {
                c.ret = NVML_ERROR_INVALID_ARGUMENT;
            } else if (memory->version != nvmlMemory_v2) {
                c.ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
            } else {
                memory->total = row[3];
                memory->reserved = 0;
                memory->used = row[2];
                memory->free = row[3] > row[2] ? row[3] - row[2] : 0;
            }
        }
        return call_end(&c);
    }
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMemoryInfo_v2, device);
    if (g) {
        if (!memory) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (memory->version != nvmlMemory_v2) {
            /* The version field is how NVML detects a caller built against a
             * different struct layout. */
            c.ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        } else {
            memory->total = g->memory_total;
            memory->reserved = g->memory_reserved;
            memory->free = memory_free(g);
            memory->used = g->memory_used;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetUtilizationRates
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetUtilizationRates, device);
    if (g) {
        if (!utilization) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            utilization->gpu = (unsigned int)g->util_gpu;
            utilization->memory = (unsigned int)g->util_memory;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTemperature
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetTemperature, device);
    if (g) {
        if (!temp || sensorType != 0) /* only NVML_TEMPERATURE_GPU exists */
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *temp = (unsigned int)g->temperature;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTemperatureThreshold
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int thresholdType, unsigned int *temp)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetTemperatureThreshold, device);
    if (g) {
        if (!temp)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (thresholdType != 1) /* only the slowdown threshold is faked */
            c.ret = NVML_ERROR_NOT_SUPPORTED;
        else
            *temp = (unsigned int)g->temperature_slowdown;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetFanSpeed
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return get_uint(FN_nvmlDeviceGetFanSpeed, device, speed, GPU_OFFSET(fan));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPowerUsage
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return get_uint(FN_nvmlDeviceGetPowerUsage, device, power, GPU_OFFSET(power_mw));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetEnforcedPowerLimit
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_uint(FN_nvmlDeviceGetEnforcedPowerLimit, device, limit, GPU_OFFSET(power_limit_mw));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPowerManagementLimit
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    /* The fake has no separate management limit: it equals the enforced one. */
    return get_uint(FN_nvmlDeviceGetPowerManagementLimit, device, limit, GPU_OFFSET(power_limit_mw));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPowerManagementDefaultLimit
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    return get_uint(FN_nvmlDeviceGetPowerManagementDefaultLimit, device, defaultLimit,
                    GPU_OFFSET(power_default_limit_mw));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTotalEnergyConsumption
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    return get_ull(FN_nvmlDeviceGetTotalEnergyConsumption, device, energy, GPU_OFFSET(energy_mj));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetClockInfo
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetClockInfo, device);
    if (g) {
        if (!clock)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (type == 0) /* NVML_CLOCK_GRAPHICS */
            *clock = (unsigned int)g->clock_graphics;
        else if (type == 1) /* NVML_CLOCK_SM */
            *clock = (unsigned int)g->clock_sm;
        else if (type == 2) /* NVML_CLOCK_MEM */
            *clock = (unsigned int)g->clock_mem;
        else if (type == 3) /* NVML_CLOCK_VIDEO: exists, but the fake has no value */
            c.ret = NVML_ERROR_NOT_SUPPORTED;
        else
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxClockInfo
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMaxClockInfo, device);
    if (g) {
        if (!clock)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (type == 0 || type == 1) /* graphics and SM share one clock domain */
            *clock = (unsigned int)g->max_clock_sm;
        else if (type == 2)
            *clock = (unsigned int)g->max_clock_mem;
        else if (type == 3)
            c.ret = NVML_ERROR_NOT_SUPPORTED;
        else
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPerformanceState
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pState)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetPerformanceState, device);
    if (g) {
        if (!pState)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *pState = (int)g->pstate;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrentClocksEventReasons
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                unsigned long long *clocksEventReasons)
{
    return get_ull(FN_nvmlDeviceGetCurrentClocksEventReasons, device, clocksEventReasons,
                   GPU_OFFSET(clocks_event_reasons));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long *clocksThrottleReasons)
{
    /* The deprecated name of the same bitmask. */
    return get_ull(FN_nvmlDeviceGetCurrentClocksThrottleReasons, device, clocksThrottleReasons,
                   GPU_OFFSET(clocks_event_reasons));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPcieThroughput
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetPcieThroughput, device);
    if (g) {
        if (!value)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (counter == 0) /* NVML_PCIE_UTIL_TX_BYTES */
            *value = (unsigned int)g->pcie_tx_kbps;
        else if (counter == 1) /* NVML_PCIE_UTIL_RX_BYTES */
            *value = (unsigned int)g->pcie_rx_kbps;
        else
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeRunningProcesses_v3
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos)
{
    return get_procs(FN_nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount, infos, false);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGraphicsRunningProcesses_v3
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos)
{
    return get_procs(FN_nvmlDeviceGetGraphicsRunningProcesses_v3, device, infoCount, infos, true);
}
#endif

/* _v2 and _v3 share the struct layout (pynvml: c_nvmlProcessInfo_v3_t is
 * c_nvmlProcessInfo_v2_t); they differ only in which drivers export them. */
#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeRunningProcesses_v2
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos)
{
    return get_procs(FN_nvmlDeviceGetComputeRunningProcesses_v2, device, infoCount, infos, false);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGraphicsRunningProcesses_v2
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos)
{
    return get_procs(FN_nvmlDeviceGetGraphicsRunningProcesses_v2, device, infoCount, infos, true);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetNumGpuCores
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    return get_uint(FN_nvmlDeviceGetNumGpuCores, device, numCores, GPU_OFFSET(num_cores));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMinorNumber
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return get_uint(FN_nvmlDeviceGetMinorNumber, device, minorNumber, GPU_OFFSET(minor));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMemoryBusWidth
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    return get_uint(FN_nvmlDeviceGetMemoryBusWidth, device, busWidth, GPU_OFFSET(bus_width));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxPcieLinkGeneration
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return get_uint(FN_nvmlDeviceGetMaxPcieLinkGeneration, device, maxLinkGen, GPU_OFFSET(pcie_max_gen));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxPcieLinkWidth
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return get_uint(FN_nvmlDeviceGetMaxPcieLinkWidth, device, maxLinkWidth, GPU_OFFSET(pcie_max_width));
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCudaComputeCapability
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetCudaComputeCapability, device);
    if (g) {
        if (!major || !minor) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *major = (int)g->cc_major;
            *minor = (int)g->cc_minor;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMigMode
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                              unsigned int *pendingMode)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMigMode, device);
    if (g) {
        if (!currentMode || !pendingMode) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *currentMode = (unsigned int)g->mig_current;
            *pendingMode = (unsigned int)g->mig_pending;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxMigDeviceCount
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMaxMigDeviceCount, device);
    if (g) {
        if (!count)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *count = g->mig_current ? FAKE_MAX_MIG : 0;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMigDeviceHandleByIndex
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                             nvmlDevice_t *migDevice)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetMigDeviceHandleByIndex, device);
    if (g) {
        if (!migDevice || index >= FAKE_MAX_MIG || !g->mig_current)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (index >= g->mig_devices.count)
            c.ret = NVML_ERROR_NOT_FOUND; /* an empty slot */
        else
            *migDevice = &g_mig_devices[c.gpu][index];
    }
    return call_end(&c);
}
#endif

static FAKE_MAYBE_UNUSED nvmlReturn_t get_instance_id(enum fn_id fn, nvmlDevice_t device, unsigned int *id, int column)
{
    struct call c;
    const unsigned long long *row;
    if (mig_begin(&c, fn, device, &row)) {
        if (!id)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = (unsigned int)row[column];
    }
    return call_end(&c);
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGpuInstanceId
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id(FN_nvmlDeviceGetGpuInstanceId, device, id, 0);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeInstanceId
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id(FN_nvmlDeviceGetComputeInstanceId, device, id, 1);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetProcessesUtilizationInfo
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                               nvmlProcessesUtilizationInfo_t *info)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetProcessesUtilizationInfo, device);
    if (g) {
        const struct rows *u = &g->proc_util;
        if (!info) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (info->version != nvmlProcessesUtilizationInfo_v1) {
            c.ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        } else if (u->count == 0) {
            c.ret = NVML_ERROR_NOT_FOUND; /* no process ran a kernel since lastSeenTimeStamp */
        } else if (!info->procUtilArray || info->processSamplesCount < u->count) {
            info->processSamplesCount = u->count;
            c.ret = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            unsigned long long now = wall_us();
            for (unsigned int i = 0; i < u->count; i++) {
                nvmlProcessUtilizationInfo_v1_t *e = &info->procUtilArray[i];
                memset(e, 0, sizeof(*e));
                e->timeStamp = now;
                e->pid = (unsigned int)u->v[i][0];
                e->smUtil = (unsigned int)u->v[i][1];
                e->memUtil = (unsigned int)u->v[i][2];
            }
            info->processSamplesCount = u->count;
            info->lastSeenTimeStamp = now;
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetProcessUtilization
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                         unsigned int *processSamplesCount,
                                                         unsigned long long lastSeenTimeStamp)
{
    (void)lastSeenTimeStamp; /* every configured sample is "new" */
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlDeviceGetProcessUtilization, device);
    if (g) {
        const struct rows *u = &g->proc_util;
        if (!processSamplesCount) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (u->count == 0) {
            c.ret = NVML_ERROR_NOT_FOUND;
        } else if (!utilization || *processSamplesCount < u->count) {
            *processSamplesCount = u->count;
            c.ret = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            unsigned long long now = wall_us();
            for (unsigned int i = 0; i < u->count; i++) {
                nvmlProcessUtilizationSample_t *e = &utilization[i];
                memset(e, 0, sizeof(*e));
                e->pid = (unsigned int)u->v[i][0];
                e->timeStamp = now;
                e->smUtil = (unsigned int)u->v[i][1];
                e->memUtil = (unsigned int)u->v[i][2];
            }
            *processSamplesCount = u->count;
        }
    }
    return call_end(&c);
}
#endif

/* ---- GPM ---------------------------------------------------------------- */

#define GPM_MAGIC 0x47504d53u /* "GPMS": tells our samples from garbage */
enum { GPM_SM_UTIL = 2, GPM_SM_OCCUPANCY = 3, GPM_ANY_TENSOR_UTIL = 5, GPM_DRAM_BW_UTIL = 10 };

struct fake_gpm_sample {
    unsigned int magic;
    bool filled;
    int gpu;
    long long gpu_instance; /* -1: the whole GPU */
    unsigned long long seq;
    unsigned long long values[4]; /* sm, occupancy, tensor, dram at the time of the sample */
};

static unsigned long long g_gpm_seq; /* guarded by g_lock */

static FAKE_MAYBE_UNUSED bool gpm_sample_ok(const struct fake_gpm_sample *s)
{
    return s && s->magic == GPM_MAGIC;
}

#ifndef FAKE_NVML_OMIT_nvmlGpmQueryDeviceSupport
FAKE_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlGpmQueryDeviceSupport, device);
    if (g) {
        if (!gpmSupport)
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (gpmSupport->version != 1)
            c.ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else
            gpmSupport->isSupportedDevice = g->gpm_supported ? 1 : 0;
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlGpmSampleAlloc
FAKE_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlGpmSampleAlloc)) {
        if (!gpmSample) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            struct fake_gpm_sample *s = calloc(1, sizeof(*s));
            if (!s) {
                c.ret = 20; /* NVML_ERROR_MEMORY */
            } else {
                s->magic = GPM_MAGIC;
                *gpmSample = s;
            }
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlGpmSampleFree
FAKE_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlGpmSampleFree)) {
        if (!gpm_sample_ok(gpmSample)) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            gpmSample->magic = 0; /* a second free is caught, not a crash */
            free(gpmSample);
        }
    }
    return call_end(&c);
}
#endif

static FAKE_MAYBE_UNUSED void gpm_fill(struct fake_gpm_sample *s, int gpu, long long gi, const unsigned long long v[4])
{
    s->filled = true;
    s->gpu = gpu;
    s->gpu_instance = gi;
    s->seq = ++g_gpm_seq;
    memcpy(s->values, v, sizeof(s->values));
}

#ifndef FAKE_NVML_OMIT_nvmlGpmSampleGet
FAKE_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlGpmSampleGet, device);
    if (g) {
        if (!gpm_sample_ok(gpmSample)) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (!g->gpm_supported) {
            c.ret = NVML_ERROR_NOT_SUPPORTED;
        } else {
            unsigned long long v[4] = { g->gpm_sm_util, g->gpm_sm_occupancy, g->gpm_tensor_util, g->gpm_dram_util };
            gpm_fill(gpmSample, c.gpu, -1, v);
        }
    }
    return call_end(&c);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlGpmMigSampleGet
FAKE_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample)
{
    struct call c;
    const struct gpu_cfg *g = dev_begin(&c, FN_nvmlGpmMigSampleGet, device);
    if (g) {
        const unsigned long long *row = NULL;
        for (unsigned int i = 0; i < g->mig_devices.count; i++) {
            if (g->mig_devices.v[i][0] == gpuInstanceId)
                row = g->mig_devices.v[i];
        }
        if (!gpm_sample_ok(gpmSample))
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        else if (!g->gpm_supported || !g->gpm_mig_supported || !g->mig_current)
            c.ret = NVML_ERROR_NOT_SUPPORTED;
        else if (!row)
            c.ret = NVML_ERROR_NOT_FOUND;
        else
            gpm_fill(gpmSample, c.gpu, (long long)gpuInstanceId, row + 4);
    }
    return call_end(&c);
}
#endif

/* Static strings, as the real library hands out. */
static const nvmlGpmMetricInfo_t gpm_info[4] = {
    { "SM_UTIL", "SM utilization", "%" },
    { "SM_OCCUPANCY", "SM occupancy", "%" },
    { "ANY_TENSOR_UTIL", "Any tensor utilization", "%" },
    { "DRAM_BW_UTIL", "DRAM bandwidth utilization", "%" },
};

static FAKE_MAYBE_UNUSED int gpm_column(unsigned int metricId)
{
    switch (metricId) {
    case GPM_SM_UTIL: return 0;
    case GPM_SM_OCCUPANCY: return 1;
    case GPM_ANY_TENSOR_UTIL: return 2;
    case GPM_DRAM_BW_UTIL: return 3;
    default: return -1;
    }
}

/* Each metric's value is sample2's (the fake's counters hold a rate, not a
 * running count); gpm_metric_errors gives a metric its own return code. */
#ifndef FAKE_NVML_OMIT_nvmlGpmMetricsGet
FAKE_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    struct call c;
    if (sys_begin(&c, FN_nvmlGpmMetricsGet)) {
        const struct fake_gpm_sample *a = metricsGet ? metricsGet->sample1 : NULL;
        const struct fake_gpm_sample *b = metricsGet ? metricsGet->sample2 : NULL;
        if (!metricsGet || metricsGet->numMetrics > FAKE_GPM_METRIC_MAX) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT;
        } else if (metricsGet->version != 1) {
            c.ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        } else if (!gpm_sample_ok(a) || !gpm_sample_ok(b) || !a->filled || !b->filled || a->gpu != b->gpu ||
                   a->gpu_instance != b->gpu_instance || a->seq >= b->seq) {
            c.ret = NVML_ERROR_INVALID_ARGUMENT; /* two samples of one GPU, in order */
        } else {
            const struct gpu_cfg *g = &g_cfg->gpus[b->gpu];
            for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
                nvmlGpmMetric_t *m = &metricsGet->metrics[i];
                int col = gpm_column(m->metricId);
                m->value = 0.0;
                memset(&m->metricInfo, 0, sizeof(m->metricInfo));
                m->nvmlReturn = col < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
                for (unsigned int r = 0; r < g->gpm_metric_errors.count; r++) {
                    if (g->gpm_metric_errors.v[r][0] == m->metricId)
                        m->nvmlReturn = (nvmlReturn_t)g->gpm_metric_errors.v[r][1];
                }
                if (m->nvmlReturn == NVML_SUCCESS) {
                    m->value = (double)b->values[col];
                    m->metricInfo = gpm_info[col];
                }
            }
        }
    }
    return call_end(&c);
}
#endif

/* ------------------------------------------------------------------------ */
/* Test hooks (not part of NVML).                                            */
/* ------------------------------------------------------------------------ */

/* Calls of `functionName` since load (or the last reset), failed calls
 * included; NULL or "*" sums all functions; an unknown name gives 0. */
FAKE_EXPORT unsigned long long fakeNvmlCallCount(const char *functionName)
{
    if (!functionName || strcmp(functionName, "*") == 0) {
        unsigned long long total = 0;
        for (int i = 0; i < FN_COUNT; i++)
            total += atomic_load_explicit(&g_calls[i], memory_order_relaxed);
        return total;
    }
    int fn = fn_lookup(functionName);
    return fn < 0 ? 0 : atomic_load_explicit(&g_calls[fn], memory_order_relaxed);
}

FAKE_EXPORT void fakeNvmlResetCallCounts(void)
{
    for (int i = 0; i < FN_COUNT; i++)
        atomic_store_explicit(&g_calls[i], 0, memory_order_relaxed);
}
