// Consumer of the installed nibble_ort package (CMake or pkg-config): includes nibble_ort.h, links the library,
// calls NibbleInfo, and checks the library path the package gives is the file it linked. Exit 0 = the package works.
#include <nibble_ort.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>

int main() {
    const char* json = NibbleInfo(1);
    const char* text = NibbleInfo(0);
    if (json == nullptr || text == nullptr || NibbleInfo(2) != nullptr) {
        std::fprintf(stderr, "NibbleInfo: unexpected null / non-null results\n");
        return 1;
    }
    const std::string want = std::string("\"version\":\"") + NIBBLE_ORT_EXPECT_VERSION + "\"";
    if (json[0] != '{' || std::strstr(json, want.c_str()) == nullptr || std::strstr(json, "\"selection\":[") == nullptr) {
        std::fprintf(stderr, "NibbleInfo(1) lacks %s or a selection: %s\n", want.c_str(), json);
        return 1;
    }
    struct stat st {};
    if (stat(NIBBLE_ORT_LIBRARY, &st) != 0) {
        std::fprintf(stderr, "the package's library path %s does not exist\n", NIBBLE_ORT_LIBRARY);
        return 1;
    }
    std::printf("%s", text);
    std::printf("library for RegisterCustomOpsLibrary: %s\n", NIBBLE_ORT_LIBRARY);
    return 0;
}
