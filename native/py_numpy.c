/* NumPy's C API table: defined here (OC_MODULE_MAIN, see oc_core.h), in a file of its own below
 * every file that uses it, and filled when the module is loaded. */
#define OC_MODULE_MAIN
#include "py_module.h"

/* 0, or -1 with ImportError set (import_array's own handling). */
int oc_py_numpy_import(void)
{
    import_array1(-1);
    return 0;
}
