/* icount-presets.h: the enc= presets (name, encoding mask and value) of both guest-instruction counters,
 * qemu-icount-plugin.c (the qemu 7.2 plugin) and qemu-exec-count.c (qemu 11's exec log): one table, so a preset
 * counts the same instructions under both. */
#include <stdint.h>

static const struct { const char *name; uint32_t mask, value; } presets[] = {
    {"sdot", 0xbfe0fc00, 0x0e809400},  {"udot", 0xbfe0fc00, 0x2e809400},  {"usdot", 0xbfe0fc00, 0x0e809c00},
    {"sdot_idx", 0xbfc0f400, 0x0f80e000}, {"udot_idx", 0xbfc0f400, 0x2f80e000},
    {"smmla", 0xffe0fc00, 0x4e80a400}, {"ummla", 0xffe0fc00, 0x6e80a400}, {"usmmla", 0xffe0fc00, 0x4e80ac00},
    {"sve_sdot", 0xffa0fc00, 0x44800000}, {"sve_udot", 0xffa0fc00, 0x44800400}, {"sve_sdot_idx", 0xffa0fc00, 0x44a00000},
    {"sve_smmla", 0xffe0fc00, 0x45009800},
    {"smopa", 0xffe0001c, 0xa0800000}, {"umopa", 0xffe0001c, 0xa1a00000},
};
